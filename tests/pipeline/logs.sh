# Shared by eval.sh, init.sh and hostfile.sh (source after common.sh): comparing the
# --log-json files of two runs.
same_log() { # KEY TOL A B: every step's KEY in A and B, |a-b| <= TOL·max(|b|,1); the same
  # steps carry KEY in both (at least one). TOL 0: the same digits (%.9g).
  python3 - "$@" <<'PY'
import json, sys
key, tol, a, b = sys.argv[1], float(sys.argv[2]), sys.argv[3], sys.argv[4]
def load(p):
    return {r["step"]: r[key] for r in map(json.loads, open(p)) if key in r}
x, y = load(a), load(b)
if not x or sorted(x) != sorted(y):
    print("%s: steps with %s differ: %s vs %s" % (key, key, sorted(x), sorted(y)))
    sys.exit(1)
worst = max(abs(x[s] - y[s]) / max(abs(y[s]), 1) for s in x)
print("%s at steps %s: worst relative difference %.3g (bound %g)" % (key, sorted(x), worst, tol))
sys.exit(0 if worst <= tol else 1)
PY
}
log_value() { # KEY STEP FILE: prints the KEY of step STEP
  python3 -c 'import json,sys; print([r[sys.argv[1]] for r in map(json.loads, open(sys.argv[3])) if r["step"] == int(sys.argv[2])][0])' "$@"
}
