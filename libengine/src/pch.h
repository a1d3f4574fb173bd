// Precompiled header for the engine, its tests, tools and benchmarks: LibTorch dominates compile
// time (~40 s a translation unit without it).
#pragma once

#include <torch/torch.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>
