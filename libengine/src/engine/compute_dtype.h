// The LibTorch dtype of a plan's precision, for the engines.
#pragma once

#include <c10/core/ScalarType.h>

#include "pstar/base/error.h"
#include "pstar/plan/run_plan.h"

namespace pstar::engine {

inline c10::ScalarType compute_dtype(plan::Precision precision) {
  switch (precision) {
    case plan::Precision::kFp32:
      return c10::kFloat;
    case plan::Precision::kBf16:
      return c10::kBFloat16;
    case plan::Precision::kFp16:
      return c10::kHalf;
  }
  PSTAR_INTERNAL_ASSERT(false, "unknown precision ", static_cast<int>(precision));
}

}  // namespace pstar::engine
