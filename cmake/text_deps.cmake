# Tokenizers (text/): PCRE2 runs the pre-tokenizers' regular expressions, utf8proc the NFC
# normalizer (Debian's libpcre2-dev and libutf8proc-dev). Their static archives are preferred, so
# the programs need no extra shared library at run time (the GPU machines take them from
# PSTAR_DEPS_DIR, scripts/gpu-deps.sh).
find_path(PSTAR_PCRE2_INCLUDE_DIR pcre2.h)
find_library(PSTAR_PCRE2_LIBRARY NAMES libpcre2-8.a pcre2-8)
find_path(PSTAR_UTF8PROC_INCLUDE_DIR utf8proc.h)
find_library(PSTAR_UTF8PROC_LIBRARY NAMES libutf8proc.a utf8proc)
if(NOT PSTAR_PCRE2_INCLUDE_DIR OR NOT PSTAR_PCRE2_LIBRARY)
  message(FATAL_ERROR "no PCRE2 (pcre2.h, libpcre2-8): install libpcre2-dev "
                      "(scripts/setup-deps.sh); the tokenizers in text/ need it")
endif()
if(NOT PSTAR_UTF8PROC_INCLUDE_DIR OR NOT PSTAR_UTF8PROC_LIBRARY)
  message(FATAL_ERROR "no utf8proc (utf8proc.h, libutf8proc): install libutf8proc-dev "
                      "(scripts/setup-deps.sh); the tokenizers in text/ need it for NFC")
endif()
add_library(pstar_pcre2 INTERFACE IMPORTED)
target_include_directories(pstar_pcre2 INTERFACE ${PSTAR_PCRE2_INCLUDE_DIR})
target_link_libraries(pstar_pcre2 INTERFACE ${PSTAR_PCRE2_LIBRARY})
add_library(pstar_utf8proc INTERFACE IMPORTED)
target_include_directories(pstar_utf8proc INTERFACE ${PSTAR_UTF8PROC_INCLUDE_DIR})
target_link_libraries(pstar_utf8proc INTERFACE ${PSTAR_UTF8PROC_LIBRARY})
