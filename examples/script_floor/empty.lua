-- An empty script: EVALSHA's fixed cost.
return 1
