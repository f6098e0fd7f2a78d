// What a trainer's model says once trained: continuations of prompts, the
// synthetic task's held-out accuracy and the end-of-run sample.
#include <algorithm>
#include <cmath>
#include <map>

#include "absl/strings/str_cat.h"
#include "runtime/engine/trainer.h"

namespace zerod {

namespace {

// The next token from one row of logits: the largest at temperature 0, else
// drawn from softmax(logits / temperature) (the row is overwritten).
int32_t pick_token(float* logits, int V, double temperature, NormalRng& rng) {
  if (temperature <= 0) return static_cast<int32_t>(std::max_element(logits, logits + V) - logits);
  const float mx = *std::max_element(logits, logits + V);
  double sum = 0;
  for (int v = 0; v < V; ++v) sum += (logits[v] = static_cast<float>(std::exp((logits[v] - mx) / temperature)));
  double u = rng.uniform() * sum;
  for (int v = 0; v < V; ++v) {
    u -= logits[v];
    if (u <= 0) return v;
  }
  return V - 1;
}

}  // namespace

absl::StatusOr<std::vector<std::vector<int32_t>>> Trainer::generate(const std::vector<std::vector<int32_t>>& prompts,
                                                                    int max_new, double temperature, int stop) {
  const int V = cfg_.model.vocab_size, window = model_->max_seq();
  std::vector<std::vector<int32_t>> out(prompts.size());
  std::map<size_t, std::vector<size_t>> by_length;
  for (size_t i = 0; i < prompts.size(); ++i) {
    if (prompts[i].empty()) return absl::InvalidArgumentError("generate: an empty prompt");
    by_length[prompts[i].size()].push_back(i);
  }
  // One rng a prompt, drawn in the prompts' order whatever the batching.
  std::vector<NormalRng> rngs;
  for (size_t i = 0; i < prompts.size(); ++i) rngs.emplace_back(sample_rng_state_++);
  for (const auto& [length, ids] : by_length) {
    // As many rows a pass as the model holds tokens at the longest input.
    const int longest = static_cast<int>(std::min<int64_t>(int64_t(length) + max_new - 1, window));
    const size_t rows = static_cast<size_t>(std::max<int64_t>(1, model_->max_tokens() / longest));
    for (size_t first = 0; first < ids.size(); first += rows) {
      const int B = static_cast<int>(std::min(rows, ids.size() - first));
      std::vector<std::vector<int32_t>> seqs;
      for (int b = 0; b < B; ++b) seqs.push_back(prompts[ids[first + b]]);
      std::vector<int32_t> tokens;
      std::vector<float> logits(size_t(B) * V);
      for (int i = 0; i < max_new; ++i) {
        const int len = std::min<int>(static_cast<int>(length) + i, window);
        tokens.clear();
        for (const auto& s : seqs) tokens.insert(tokens.end(), s.end() - len, s.end());
        ZEROD_RETURN_IF_ERROR(model_->forward_logits(weights(), tokens.data(), B, len, logits.data(),
                                                     /*last_only=*/true));
        for (int b = 0; b < B; ++b) {
          seqs[b].push_back(pick_token(logits.data() + size_t(b) * V, V, temperature, rngs[ids[first + b]]));
        }
      }
      for (int b = 0; b < B; ++b) {
        std::vector<int32_t>& o = out[ids[first + b]];
        o.assign(seqs[b].begin() + static_cast<int64_t>(length), seqs[b].end());
        if (stop >= 0) {
          auto at = std::find(o.begin(), o.end(), stop);
          if (at != o.end()) o.erase(at + 1, o.end());
        }
      }
    }
  }
  return out;
}

namespace {

std::vector<int32_t> to_tokens(const std::string& s) {
  std::vector<int32_t> t;
  for (unsigned char ch : s) t.push_back(ch);
  return t;
}

std::string to_text(const std::vector<int32_t>& tokens) {
  std::string s;
  for (int32_t t : tokens) s.push_back(t < 256 ? static_cast<char>(t) : '?');
  return s;
}

}  // namespace

absl::StatusOr<double> Trainer::synthetic_accuracy() {
  if (cfg_.data.kind != DataKind::kSynthetic || data_.heldout.empty()) return -1.0;
  // Every rank answers every prompt: the passes, batched, are few, every
  // rank makes the same ones (ZeRO-3 gathers are collective), and the
  // figure does not depend on the world size.
  std::vector<std::vector<int32_t>> prompts;
  size_t longest_answer = 0;
  for (const auto& [prompt, answer] : data_.heldout) {
    // A line starts after a newline in the training stream.
    prompts.push_back(to_tokens("\n" + prompt));
    longest_answer = std::max(longest_answer, answer.size());
  }
  ZEROD_ASSIGN_OR_RETURN(const auto got, generate(prompts, static_cast<int>(longest_answer) + 1, 0, '\n'));
  // Cut after its first newline, a row is right only if that newline ends
  // the answer: more tokens than its answer needs change nothing.
  int64_t correct = 0;
  for (size_t i = 0; i < got.size(); ++i) correct += to_text(got[i]) == data_.heldout[i].second + "\n";
  return static_cast<double>(correct) / static_cast<double>(got.size());
}

absl::StatusOr<std::string> Trainer::sample_text() {
  if (cfg_.run.sample_tokens == 0) return std::string();
  if (cfg_.data.kind == DataKind::kSynthetic) {
    std::vector<std::vector<int32_t>> prompts;
    for (size_t i = 0; i < std::min<size_t>(4, data_.heldout.size()); ++i) {
      prompts.push_back(to_tokens("\n" + data_.heldout[i].first));
    }
    ZEROD_ASSIGN_OR_RETURN(const auto got, generate(prompts, 4, cfg_.run.sample_temperature, '\n'));
    std::string out;
    for (size_t i = 0; i < got.size(); ++i) absl::StrAppend(&out, data_.heldout[i].first, to_text(got[i]));
    return out;
  }
  if (cfg_.data.kind == DataKind::kText) {
    std::vector<uint32_t> ids(std::min<int64_t>(16, data_.tokens.size()));
    data_.tokens.read(0, static_cast<int64_t>(ids.size()), ids.data());
    const std::vector<int32_t> prompt(ids.begin(), ids.end());
    ZEROD_ASSIGN_OR_RETURN(const auto got, generate({prompt}, cfg_.run.sample_tokens, cfg_.run.sample_temperature));
    return to_text(prompt) + to_text(got[0]);
  }
  return std::string();
}

}  // namespace zerod
