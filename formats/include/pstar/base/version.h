// pstar's version, from one place: the top-level CMakeLists.txt's project(VERSION). `pstar
// --version` prints it, and profiles and checkpoint manifests record which pstar wrote them.
#pragma once

namespace pstar {

// "MAJOR.MINOR.PATCH", e.g. "0.1.0".
const char* version();

}  // namespace pstar
