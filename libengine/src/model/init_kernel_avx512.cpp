// The counter-based generator's kernel for AVX512 (init_kernel_impl.h; its -m flags in
// model/sources.cmake). Called only where the CPU has it (init_kernel.cpp's dispatch).
#define PSTAR_INIT_ISA avx512
#include "init_kernel_impl.h"
