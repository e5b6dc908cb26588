#!/usr/bin/env bash
# tests/includes/check_includes.sh SRC_DIR — the seams between the folders, checked.
#
# The compiler (passes/, codegen/) and the runtime (runtime/) meet only in plan.json:
# what both must agree on lives below both, in contract/ (plan.json's vocabulary,
# the instruction-stream generator, the stage ABI, the hash) and kernels/ (the CPU
# and CUDA kernels and the CUDA kernel list). So:
#   runtime/           includes nothing of passes/ or codegen/, and links neither;
#   passes/, codegen/  include nothing of runtime/;
#   contract/, kernels/ include nothing of passes/, codegen/ or runtime/;
# and no file of these folders climbs out of its folder with "../" (which would
# dodge the rules). runtime/ itself holds only its CMakeLists.txt: every source file
# lives in the subfolder that owns it (runtime/CMakeLists.txt lists them), so a
# source, header, .cmake or .html file in runtime/'s root is a breach too.
# Each breach is printed as FILE:LINE: error: ...; exit 1 if any.
set -u
src=${1:?usage: check_includes.sh SRC_DIR}
cd "$src" || exit 2
for d in runtime passes codegen contract kernels; do
  [ -d "$d" ] || { echo "check_includes.sh: $src/$d: no such folder" >&2; exit 2; }
done
bad=0
# forbid FOLDER PATTERN WHY: every #include line under FOLDER matching PATTERN.
forbid() {
  local hits
  hits=$(grep -rnE --include='*.c' --include='*.h' --include='*.cuh' --include='*.cu' \
           --include='*.cpp' "^[[:space:]]*#[[:space:]]*include[[:space:]]*[\"<]($2)" "$1")
  if [ -n "$hits" ]; then
    printf '%s\n' "$hits" | awk -F: -v why="$3" '{ print $1 ":" $2 ": error: " why }'
    bad=1
  fi
}
forbid runtime 'passes/|codegen/' 'runtime/ includes the compiler (passes/, codegen/): put what both need in contract/ or kernels/'
forbid passes 'runtime/' 'passes/ includes runtime/: put what both need in contract/ or kernels/'
forbid codegen 'runtime/' 'codegen/ includes runtime/: put what both need in contract/ or kernels/'
forbid contract 'passes/|codegen/|runtime/' 'contract/ lies below the compiler and the runtime and includes neither'
forbid kernels 'passes/|codegen/|runtime/|contract/' 'kernels/ lies below the compiler and the runtime and includes neither'
for d in runtime passes codegen contract kernels; do
  forbid "$d" '\.\./' "a relative include out of $d/ (name the file from the repository root)"
done
# runtime/'s root: no source, header, .cmake or .html file (CMakeLists.txt is its one file).
hits=$(find runtime -maxdepth 1 -type f \( -name '*.c' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' \
         -o -name '*.cpp' -o -name '*.cmake' -o -name '*.html' \) | sort)
if [ -n "$hits" ]; then
  printf '%s\n' "$hits" | awk '{ print $1 ":1: error: a file in runtime/'"'"'s root: put it in the subfolder that owns it (see runtime/CMakeLists.txt)" }'
  bad=1
fi
# The link: no runtime library may pull the compiler's in.
hits=$(grep -rnE --include='CMakeLists.txt' --include='*.cmake' 'pd2bw_(passes|codegen)\b' runtime)
if [ -n "$hits" ]; then
  printf '%s\n' "$hits" | awk -F: '{ print $1 ":" $2 ": error: a runtime library links the compiler (pd2bw_passes or pd2bw_codegen)" }'
  bad=1
fi
exit $bad
