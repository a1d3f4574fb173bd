// Process-wide runtime settings: threads and the PSTAR_ONEDNN switch.
#include "pstar/core/device.h"

#include <cstdlib>
#include <string>

#include <ATen/Context.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "pstar/base/error.h"
#include "test_util.h"

namespace pstar::core {
namespace {

// Sets (or, with nullptr, unsets) an environment variable for one scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    value ? setenv(name, value, 1) : unsetenv(name);
  }
  ~ScopedEnv() { old_.empty() ? unsetenv(name_) : setenv(name_, old_.c_str(), 1); }

 private:
  const char* name_;
  std::string old_;
};

TEST(ConfigureRuntime, OneDnnSwitchFollowsTheEnvironment) {
  const bool before = at::globalContext().userEnabledMkldnn();
  {
    ScopedEnv env("PSTAR_ONEDNN", "0");
    configure_runtime();
    EXPECT_FALSE(at::globalContext().userEnabledMkldnn());
  }
  {
    ScopedEnv env("PSTAR_ONEDNN", "1");
    configure_runtime();
    EXPECT_TRUE(at::globalContext().userEnabledMkldnn());
  }
  {
    ScopedEnv env("PSTAR_ONEDNN", "off");
    const std::string message =
        pstar::testing::message_of<ConfigError>([] { configure_runtime(); });
    EXPECT_NE(message.find("PSTAR_ONEDNN=off: expected 0"), std::string::npos) << message;
  }
  at::globalContext().setUserEnabledMkldnn(before);
}

TEST(ConfigureRuntime, OmpNumThreadsIsLeftAlone) {
  ScopedEnv env("OMP_NUM_THREADS", "1");
  torch::set_num_threads(1);
  configure_runtime();
  EXPECT_EQ(torch::get_num_threads(), 1);
}

}  // namespace
}  // namespace pstar::core
