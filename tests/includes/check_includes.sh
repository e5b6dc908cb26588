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
#   runtime/ includes and links nothing of tokenizer/ (pd2bwrun reads token files,
#   never text), and tokenizer/ of the runtime only runtime/io/ (the files it reads);
# and no file of these folders climbs out of its folder with "../" (which would
# dodge the rules). runtime/ itself holds only its CMakeLists.txt: every source file
# lives in the subfolder that owns it (runtime/CMakeLists.txt lists them), so a
# source, header, .cmake or .html file in runtime/'s root is a breach too.
# Inside runtime/ the folders are layers (runtime/CMakeLists.txt lists them): a file
# includes only its own folder's headers and those of lower layers, so no two folders
# include each other and exec/ cannot reach up into pipeline/.
# Each breach is printed as FILE:LINE: error: ...; exit 1 if any.
set -u
src=${1:?usage: check_includes.sh SRC_DIR}
cd "$src" || exit 2
for d in runtime passes codegen contract kernels tokenizer; do
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
forbid runtime 'tokenizer/' 'runtime/ includes tokenizer/: pd2bwrun reads token files, never text (only pd2bw-data links the tokenizer)'
forbid tokenizer 'passes/|codegen/|runtime/[^i]|runtime/i[^o]|runtime/io[^/]' 'tokenizer/ includes the runtime beyond runtime/io/ (the files it reads)'
for d in runtime passes codegen contract kernels tokenizer; do
  forbid "$d" '\.\./' "a relative include out of $d/ (name the file from the repository root)"
done
# runtime/'s root: no source, header, .cmake or .html file (CMakeLists.txt is its one file).
hits=$(find runtime -maxdepth 1 -type f \( -name '*.c' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' \
         -o -name '*.cpp' -o -name '*.cmake' -o -name '*.html' \) | sort)
if [ -n "$hits" ]; then
  printf '%s\n' "$hits" | awk '{ print $1 ":1: error: a file in runtime/'"'"'s root: put it in the subfolder that owns it (see runtime/CMakeLists.txt)" }'
  bad=1
fi
# runtime/'s layers, low to high (runtime/CMakeLists.txt); one line per layer, its folders.
layers='io blas
report calibrate
core
transport cuda
exec
pipeline
reference
driver
cuda/exec
cuda/pipe'
hits=$(grep -rnE --include='*.c' --include='*.h' --include='*.cuh' --include='*.cu' \
         '^[[:space:]]*#[[:space:]]*include[[:space:]]*"runtime/' runtime |
       awk -v layers="$layers" '
         BEGIN { n = split(layers, L, "\n"); for (i = 1; i <= n; i++) { m = split(L[i], f, " "); for (k = 1; k <= m; k++) lvl[f[k]] = i - 1 } }
         function folder(path,   a, n) {  # runtime/X/... or runtime/cuda/{exec,pipe}/...
           n = split(path, a, "/")
           if (a[2] == "cuda" && (a[3] == "exec" || a[3] == "pipe") && n > 3) return "cuda/" a[3]
           return a[2]
         }
         { split($0, pc, ":"); file = pc[1]; line = pc[2]; inc = $0; sub(/^[^"]*"/, "", inc); sub(/".*/, "", inc)
           from = folder(file); to = folder(inc)
           if (from == to) next
           if (!(from in lvl)) { print file ":" line ": error: runtime/" from "/ is in no layer: add it to runtime/CMakeLists.txt and tests/includes/check_includes.sh"; next }
           if (!(to in lvl)) { print file ":" line ": error: " inc ": runtime/" to "/ is in no layer"; next }
           if (lvl[to] >= lvl[from])
             print file ":" line ": error: runtime/" from "/ (layer " lvl[from] ") includes " inc " (runtime/" to "/, layer " lvl[to] "): a folder includes only lower layers (runtime/CMakeLists.txt)"
         }')
if [ -n "$hits" ]; then
  printf '%s\n' "$hits"
  bad=1
fi
# The same order for the links: a folder's CMakeLists.txt names no library of its own
# or a higher layer's (pd2bw_runtime is core/'s, pd2bw_cuda_exec cuda/exec/'s, ...).
hits=$(for f in $(find runtime -mindepth 2 -name CMakeLists.txt | sort); do
         d=${f#runtime/}; d=${d%/CMakeLists.txt}
         grep -noE 'pd2bw_[a-z_]+' "$f" | sed "s|^|$f:$d:|"
       done | awk -F: -v layers="$layers" '
         BEGIN { n = split(layers, L, "\n"); for (i = 1; i <= n; i++) { m = split(L[i], f, " "); for (k = 1; k <= m; k++) lvl[f[k]] = i - 1 }
                 lib["pd2bw_runtime"] = "core"; lib["pd2bw_cuda_exec"] = "cuda/exec"; lib["pd2bw_cuda_pipe"] = "cuda/pipe" }
         { to = $4 in lib ? lib[$4] : substr($4, 7)
           if (!(to in lvl) || !($2 in lvl) || to == $2) next
           if (lvl[to] >= lvl[$2])
             print $1 ":" $3 ": error: runtime/" $2 "/ links " $4 " (runtime/" to "/, layer " lvl[to] "): a library links only lower layers (runtime/CMakeLists.txt)" }')
if [ -n "$hits" ]; then
  printf '%s\n' "$hits"
  bad=1
fi
# The link: no runtime library may pull the compiler's or the tokenizer's in.
hits=$(grep -rnE --include='CMakeLists.txt' --include='*.cmake' 'pd2bw_(passes|codegen|tokenizer)\b' runtime)
if [ -n "$hits" ]; then
  printf '%s\n' "$hits" | awk -F: '{ print $1 ":" $2 ": error: a runtime library links the compiler or the tokenizer (pd2bw_passes, pd2bw_codegen, pd2bw_tokenizer)" }'
  bad=1
fi
exit $bad
