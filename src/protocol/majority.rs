//! The majority rule, written once: of N voters, N/2 + 1 decide. Every
//! count of answers (acquire, raise, extend, release, a holder read, the
//! connection warm-up) asks this type, never the arithmetic itself.

/// The quorum of a set of voters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Quorum {
    voters: usize,
}

impl Quorum {
    /// The quorum of `voters` voters.
    pub(crate) fn of(voters: usize) -> Self {
        Quorum { voters }
    }

    /// How many must agree: N/2 + 1.
    pub(crate) fn size(self) -> usize {
        self.voters / 2 + 1
    }

    /// Whether `agreeing` voters are a quorum.
    pub(crate) fn reached(self, agreeing: usize) -> bool {
        agreeing >= self.size()
    }

    /// Whether `against` voters (refused, failed or silent) leave too few
    /// for a quorum.
    pub(crate) fn ruled_out(self, against: usize) -> bool {
        against > self.voters - self.size()
    }

    /// Whether these counts decide the outcome either way.
    pub(crate) fn decided(self, agreeing: usize, against: usize) -> bool {
        self.reached(agreeing) || self.ruled_out(against)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_majority_decides_and_a_minority_cannot_block() {
        for (voters, size) in [(1, 1), (2, 2), (3, 2), (4, 3), (5, 3), (7, 4)] {
            let q = Quorum::of(voters);
            assert_eq!(q.size(), size, "{voters} voters");
            assert!(q.reached(size) && !q.reached(size - 1));
            // As many against as leave exactly a quorum: still open.
            assert!(!q.ruled_out(voters - size) && q.ruled_out(voters - size + 1));
            assert!(!q.decided(size - 1, voters - size));
        }
    }
}
