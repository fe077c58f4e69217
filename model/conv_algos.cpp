#include "model/conv_algos.hpp"

#include <algorithm>
#include <stdexcept>

namespace lenet::model {

std::vector<int> fp32_deterministic(const std::vector<ConvAlgoPerf>& perf) {
  std::vector<int> algos;
  for (const ConvAlgoPerf::Math math : {ConvAlgoPerf::kFma, ConvAlgoPerf::kDefault}) {
    for (const ConvAlgoPerf& p : perf) {
      if (p.ok && p.deterministic && p.math == math && std::find(algos.begin(), algos.end(), p.algo) == algos.end())
        algos.push_back(p.algo);
    }
  }
  return algos;
}

std::vector<int> trial_rows(const std::vector<int>& row_counts, int max_rows) {
  std::vector<int> rows;
  for (int r : row_counts) {
    if (r > max_rows) {
      throw std::invalid_argument("CudaLenet: row count " + std::to_string(r) + " above the capacity " +
                                  std::to_string(max_rows));
    }
    if (r > 0) rows.push_back(r);
  }
  rows.push_back(max_rows);
  std::sort(rows.begin(), rows.end());
  rows.erase(std::unique(rows.begin(), rows.end()), rows.end());
  return rows;
}

ConvAlgoChoice choose_conv_algo(const std::vector<int>& candidates, const std::vector<int>& rows,
                                size_t max_workspace, const ConvAlgoTrials& trials) {
  ConvAlgoChoice choice;
  for (const int algo : candidates) {
    size_t need = 0;
    std::string why;
    for (int r : rows) {
      size_t bytes = 0;
      why = trials.workspace(algo, r, &bytes);
      if (!why.empty()) {
        why = "workspace query at " + std::to_string(r) + " rows: " + why;
      } else if (bytes > max_workspace) {
        why = "workspace of " + std::to_string(bytes) + " bytes at " + std::to_string(r) + " rows";
      }
      if (!why.empty()) break;
      need = std::max(need, bytes);
    }
    if (why.empty() && !trials.reserve(need))
      why = "its workspace of " + std::to_string(need) + " bytes could not be allocated";
    for (int r : rows) {  // at every row count a step or an evaluation will use
      if (!why.empty()) break;
      if (const std::string failed = trials.run(algo, r, need); !failed.empty())
        why = "trial run at " + std::to_string(r) + " rows: " + failed;
    }
    trials.settle();
    if (why.empty()) {
      choice.algo = algo;
      choice.workspace = need;
      return choice;
    }
    choice.passed_over += (choice.passed_over.empty() ? "" : "; ") + std::to_string(algo) + ": " + why;
  }
  if (choice.passed_over.empty()) choice.passed_over = "its heuristic listed no deterministic non-tensor-op candidate";
  return choice;
}

}  // namespace lenet::model
