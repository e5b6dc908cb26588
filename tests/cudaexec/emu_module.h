/* tests/cudaexec/emu_module.h — generated CUDA sources as host modules of the CUDA
 * emulator (tests/cuda/cuda_emu.cpp), shared by the tests that run them without a GPU
 * (tests/cudaexec/emu_device.c, tests/cudagen/test_cudagen_emu.c).
 *
 * A module is one C++ file: cuda_emu.cpp (the library kernels, each CUDA thread a
 * fibre: emu_launch), the generated .cu files, and a table of the source's own
 * kernels with `emu_stage_launch`, which runs them as the library's (each thread a
 * fibre: the fused add + layernorm kernels synchronise) and hands every other name to
 * a fallback. The
 * writer below emits the table; emu_module_build compiles the file to a shared
 * object with the C++ compiler CMake found (PD2BW_TEST_CXX). Run from the source
 * root: the file includes "tests/cuda/cuda_emu.cpp".
 */
#ifndef PD2BW_TESTS_CUDAEXEC_EMU_MODULE_H
#define PD2BW_TESTS_CUDAEXEC_EMU_MODULE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

/* emu_stage_launch's signature (also emu_launch's and the modules' emu_stage_launch). */
typedef int (*EmuLaunchFn)(const char *name, unsigned grid, unsigned block, void **args);

/* Opens the table of the source's own kernels (namespace { ... stage_kernels[] = {). */
/* Writes the #include of tests/cuda/cuda_emu.cpp that starts an emulated module,
 * preceded by the kernel library's "#define PKC_ATT_HS n" and "#define PKC_ATT_T n"
 * when lib_src (the library text, or a stage's) has them: cuda_emu.cpp includes the
 * kernels, whose include guards then skip the pasted copy, so the defines must come
 * first, as in NVRTC's compile (they select the head size and sequence length the
 * tensor-core attention is compiled for). */
void emu_include_emulator(FILE *f, const char *lib_src);
void emu_table_begin(FILE *f);
/* One table entry: kernel `name`, defined in the module's sources. */
void emu_table_entry(FILE *f, const char *name);
/* Closes the table and writes emu_stage_launch: its kernels, else `fallback`, a C++
 * expression over (name, grid, block, args), e.g. "-1" or the emulator's library
 * "emu_launch(name, grid, block, args)". */
void emu_table_end(FILE *f, const char *fallback);

/* Compiles `cpp` into the shared object `so` (-I the source root, the current
 * directory, and `incdir`, where the .cu files it includes are). The compiled module
 * is cached by its preprocessed text in $PD2BW_TEST_EMU_CACHE (default
 * /tmp/pd2bw-test-cache-emu-UID) and `so` is a hard link to it, so each distinct
 * module is compiled once per machine, not once per test process. false with the
 * command in err. */
bool emu_module_build(const char *cpp, const char *so, const char *incdir, char *err, size_t errlen);

#endif
