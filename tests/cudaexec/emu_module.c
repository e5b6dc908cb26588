/* tests/cudaexec/emu_module.c — see emu_module.h. */
#include "emu_module.h"

#include <stdlib.h>
#include <string.h>

void emu_include_emulator(FILE *f, const char *lib_src) {
  static const char *const defs[] = {"\n#define PKC_ATT_HS ", "\n#define PKC_ATT_T "};
  for (size_t k = 0; k < sizeof defs / sizeof defs[0]; k++) {
    const char *d = strstr(lib_src, defs[k]);
    if (d) fprintf(f, "%s%d\n", defs[k] + 1, atoi(d + strlen(defs[k])));
  }
  fprintf(f, "#include \"tests/cuda/cuda_emu.cpp\"\n");
}

void emu_table_begin(FILE *f) {
  fprintf(f, "namespace {\nstruct StageEntry { const char *name; void (*call)(void **); };\n"
             "const StageEntry stage_kernels[] = {\n");
}

void emu_table_entry(FILE *f, const char *name) {
  fprintf(f, "  {\"%s\", &Caller<decltype(%s)>::call<%s>},\n", name, name, name);
}

void emu_table_end(FILE *f, const char *fallback) {
  fprintf(f,
          "  {nullptr, nullptr}};\n}\n"
          "// The stage's kernels run as the library's do: a block's threads as fibres (the\n"
          "// fused residual-add + layernorm kernels synchronise).\n"
          "extern \"C\" int emu_stage_launch(const char *name, unsigned grid, unsigned block, void **args) {\n"
          "  for (const StageEntry *e = stage_kernels; e->name; e++)\n"
          "    if (strcmp(e->name, name) == 0) return emu_run(name, e->call, grid, block, args);\n"
          "  return %s;\n}\n",
          fallback);
}
