# scratch.sh NAME: sourced by test scripts that count their own checks (tests/runtime/):
# a scratch directory T (/tmp/pd2bw-NAME-XXXXXX, removed on exit), the shared compile
# cache PD2BW_CACHE, pass/fail counting — ok (silent) and bad NAME (a FAIL line on
# stderr) — and whole_lines FILE (a non-empty JSON-lines file ending in a whole line:
# a streamed log cut off at a failed write). tests/pipeline/common.sh is the fuller kit of the tests/pipeline/ scripts.
T=$(mktemp -d "/tmp/pd2bw-$1-XXXXXX")
trap 'rm -rf "$T"' EXIT
export PD2BW_CACHE=${PD2BW_CACHE:-/tmp/pd2bw-test-cache-$(id -u)}
pass=0
fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL $*" >&2; }
whole_lines() { [ -s "$1" ] && [ "$(tail -c 1 "$1" | od -An -c | tr -d ' ')" = '\n' ] && ! grep -qv '}$' "$1"; }
