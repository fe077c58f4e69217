// How a GPU replica chooses its cuDNN convolution algorithms, as plain C++: cuda_lenet.cpp feeds it
// cuDNN's heuristic list and runs the trials it asks for, and tests/cpu/test_conv_algos.cpp checks the
// policy (which candidates, in which order, when one is passed over, what the error says) on any machine.
#pragma once
#include <cstddef>
#include <functional>
#include <string>
#include <vector>

namespace lenet::model {

// One entry of cuDNN's cudnnGetConvolution*Algorithm_v7 list, in plain terms.
struct ConvAlgoPerf {
  enum Math { kFma, kDefault, kTensorOp };  // cudnnMathType_t: FMA, DEFAULT, TENSOR_OP(_ALLOW_CONVERSION)
  int algo = 0;
  bool ok = false;  // status CUDNN_STATUS_SUCCESS
  bool deterministic = false;
  Math math = kFma;
};

// The candidates to try, to run with the convolution's math type pinned to FMA (full fp32): DEFAULT math
// permits TF32 tensor cores from A100 on (cuDNN's cudnnMathType_t documentation), rounding every input to
// 10 mantissa bits and breaking the comparison with the CPU backend. Deterministic entries that succeeded,
// those listed with FMA math first, then those listed with DEFAULT math (some cuDNN versions report plain
// fp32 kernels that way; they still run under FMA), each algorithm once, in the list's order; tensor-op
// entries never.
std::vector<int> fp32_deterministic(const std::vector<ConvAlgoPerf>& perf);

// The row counts to try every candidate at: the positive ones of `row_counts` and `max_rows`, ascending,
// each once. Throws std::invalid_argument for a count above max_rows.
std::vector<int> trial_rows(const std::vector<int>& row_counts, int max_rows);

// What choose_conv_algo asks of the device. workspace() and run() return "" on success, else why they failed.
struct ConvAlgoTrials {
  std::function<std::string(int algo, int rows, size_t* bytes)> workspace;  // the workspace `algo` needs at `rows`
  std::function<bool(size_t bytes)> reserve;                                // a scratch workspace of `bytes`
  std::function<std::string(int algo, int rows, size_t bytes)> run;        // one trial in the scratch workspace
  std::function<void()> settle;  // after each candidate: wait for its trials, then free the scratch
};

struct ConvAlgoChoice {
  int algo = -1;  // -1: none; `passed_over` then says why
  size_t workspace = 0;  // the chosen algorithm's largest need over the rows
  std::string passed_over;  // "algo: why" for each candidate passed over, "; "-separated
};

// The first candidate whose workspace query succeeds at every row count with at most `max_workspace`
// bytes, whose scratch workspace can be reserved, and that then runs once at every row count: a
// heuristic's list is not a promise that an algorithm runs under FMA math, so a failure is a skipped
// candidate instead of a failed training step. settle() follows every candidate tried, chosen or not,
// unless a callback throws: the exception then leaves at once, and whoever owns the scratch frees it.
ConvAlgoChoice choose_conv_algo(const std::vector<int>& candidates, const std::vector<int>& rows,
                                size_t max_workspace, const ConvAlgoTrials& trials);

}  // namespace lenet::model
