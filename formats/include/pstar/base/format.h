// Numbers as log lines show them to people (byte sizes: size.h's format_bytes).
#pragma once

#include <string>

namespace pstar {

// "1.23G", "4.56M", "7.9k", "999": counts of parameters, tokens, tokens per second.
std::string format_count(double n);

// "m:ss" below an hour, "h:mm:ss" from one on; rounded to the second, negative as 0.
std::string format_duration(double seconds);

// `value` with `decimals` digits after the point ("%.*f"): "2.3026".
std::string format_fixed(double value, int decimals);

}  // namespace pstar
