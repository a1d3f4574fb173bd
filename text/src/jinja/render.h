// Running a parsed chat template (ast.h) over its variables.
#pragma once

#include "ast.h"
#include "value.h"

namespace pstar::text::jinja {

// The output of `program` with `globals` as its variables (messages, bos_token, ...), each byte
// with its origin (Note [string origins]). Throws FormatError naming the template and the line
// for what the template cannot do with its values, and for raise_exception() (the message is the
// template's own).
Str render(const Program& program, const Dict& globals);

}  // namespace pstar::text::jinja
