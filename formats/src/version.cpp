#include "pstar/base/version.h"

// Set for this one file by formats/CMakeLists.txt from PROJECT_VERSION, so that a new version
// recompiles one translation unit rather than everything that includes a header.
#ifndef PSTAR_VERSION_STRING
#error "PSTAR_VERSION_STRING is not defined; formats/CMakeLists.txt sets it from PROJECT_VERSION"
#endif

namespace pstar {

const char* version() { return PSTAR_VERSION_STRING; }

}  // namespace pstar
