// The run's TensorBoard event file (training.tensorboard_dir, `--tensorboard DIR`;
// docs/training.md#tensorboard): one scalar per figure of the step's metrics line (Note [one
// metric table] in train/metrics.h), the resolved config as text, and `pstar eval`'s held-out
// loss, in the format of formats/event_file.h.
//
// Note [tensorboard flushes]
// Records are queued and written at the steps the console logs as lines of their own (step 1,
// every training.log_interval-th, evaluated steps, the last), at each checkpoint, when a signal
// stops the run, and when the log is destroyed: TensorBoard shows a live run at the pace of its
// log, and a run killed outright loses at most the steps since the last of these. A failed write
// is a warning and training goes on (the file is kept whole: formats::EventFileWriter::flush);
// only a directory or file that cannot be created at start-up is an error.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "pstar/train/metrics.h"

namespace pstar::formats {
class EventFileWriter;
}

namespace pstar::train {

class TensorBoardLog {
 public:
  // A new event file in `dir` (created with its parents); IoError naming `what` (the config key or
  // option that gave it) and the directory when it cannot be created.
  TensorBoardLog(const std::string& dir, const std::string& what);
  // Flushes what is queued; a failure is a warning.
  ~TensorBoardLog();
  TensorBoardLog(const TensorBoardLog&) = delete;
  TensorBoardLog& operator=(const TensorBoardLog&) = delete;

  // The start of a training run: a run resumed at `resumed_step` > 0 first marks its restart
  // there (SessionLog START at resumed_step + 1: TensorBoard drops what earlier files hold from
  // that step on), then `config_json` (the resolved config) as text under the tag "config" at
  // step 0. Flushed at once.
  void start_run(int64_t resumed_step, const std::string& config_json);
  // One scalar per numeric figure of metric_values(m) at m.step; a non-finite one (a skipped
  // step's loss, written as null in the metrics file) is left out.
  void write_step(const StepMetrics& m);
  // `pstar eval`'s held-out loss at the checkpoint's step, under the tag training uses.
  void write_eval(int64_t step, double loss);
  // Note [tensorboard flushes]: writes what is queued; a failure is a warning.
  void flush();
  const std::string& path() const;

 private:
  std::unique_ptr<formats::EventFileWriter> file_;
};

}  // namespace pstar::train
