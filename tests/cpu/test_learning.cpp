// Training really learns: three epochs on all 60,000 Fashion-MNIST training examples, on two CPU
// replicas, tested on all 10,000 test examples.
//
// Calibration: with N(0, 0.01^2) weights and lr 0.2 the loss sits at ln 10 = 2.3026 for most of the first
// epoch (test accuracy 0.10 after it), then falls: this implementation measured test accuracy 0.100,
// 0.611, 0.720 after epochs 1, 2, 3 (seed 1, one replica), and an independent implementation 0.10 and
// 0.64 after epochs 1 and 2. The bound 0.65 after three epochs leaves margin for the seed and replica
// count while failing any run that stays on the plateau (0.10) or learns only partly.
#include <gtest/gtest.h>

#include <cmath>
#include <sstream>

#include "engine/cpu_backend.hpp"
#include "engine/trainer.hpp"
#include "io/dataset.hpp"
#include "model/lenet.hpp"

namespace {

using namespace lenet;

TEST(Learning, ThreeEpochsLeaveThePlateau) {
  const io::FashionMnist data = io::load_fashion_mnist(LENET_TEST_DATA_DIR);
  engine::TrainOptions opt;
  opt.epochs = 3;
  opt.seed = 1;
  engine::CpuBackend backend(2, model::init_parameters<float>(opt.seed));
  std::ostringstream log;
  const engine::TrainResult r = engine::train(backend, data, opt, log, false);
  ASSERT_EQ(r.epochs.size(), 3u);
  EXPECT_NEAR(r.epochs[0].train_loss, std::log(10.0), 0.05) << "first epoch on the plateau\n" << log.str();
  EXPECT_LT(r.epochs[2].train_loss, 1.0) << log.str();
  EXPECT_GE(r.epochs[2].test_acc, 0.65) << log.str();
  EXPECT_EQ(backend.parameters(0), backend.parameters(1)) << "replicas must stay identical";
}

}  // namespace
