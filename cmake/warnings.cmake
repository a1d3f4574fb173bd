# pstar_set_warnings(target): the project's warning set, and sanitizers when asked for.
function(pstar_set_warnings target)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Wno-unused-parameter)
  if(PSTAR_WERROR)
    target_compile_options(${target} PRIVATE -Werror)
  endif()
endfunction()

if(PSTAR_SANITIZE)
  add_compile_options(-fsanitize=address,undefined -fno-omit-frame-pointer)
  add_link_options(-fsanitize=address,undefined)
endif()
