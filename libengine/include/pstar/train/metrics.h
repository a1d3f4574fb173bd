// The --metrics file: JSON Lines, one object per optimizer step, flushed as it is written so a
// crashed run keeps every finished step.
#pragma once

#include <cstdio>
#include <memory>
#include <string>

namespace pstar::train {

struct StepMetrics;

class MetricsWriter {
 public:
  // Truncates `path`; IoError naming it if it cannot be created.
  explicit MetricsWriter(const std::string& path);
  void write(const StepMetrics& metrics);

 private:
  struct Closer {
    void operator()(std::FILE* f) const { std::fclose(f); }
  };
  std::string path_;
  std::unique_ptr<std::FILE, Closer> file_;
};

}  // namespace pstar::train
