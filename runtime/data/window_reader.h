// One window of a token stream as training reads it (inputs, targets and
// positions), for the loader's walk (data_loader.h) and the held-out set's
// (eval_windows.h); and which windows data.eval.fraction holds out.
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/data/token_stream.h"

namespace zerod {

// Windows of seq_len + 1 tokens (input and shifted target), each starting
// where the last one's targets end; a windowed dataset's windows are its
// examples, seq_len ids each, a target the mask leaves out (and a window's
// last) -1, which the loss skips. A packed one's windows hold several
// documents each: a document's first id (kDocStart) is never the target
// of the id before it, and a token's position counts from its document's
// start.
class WindowReader {
 public:
  // The windows of the stream's `count` ids from `begin` on (-1: to its
  // end): one source of data.sources, or all of it.
  WindowReader(const TokenStream* tokens, int seq_len, bool windowed, bool packed, int64_t begin = 0,
               int64_t count = -1)
      : tokens_(tokens),
        seq_len_(seq_len),
        windowed_(windowed),
        packed_(packed),
        begin_(begin),
        count_(count < 0 ? tokens->size() - begin : count),
        window_(seq_len + 1) {}

  static int64_t num_windows(int64_t tokens, int seq_len, bool windowed) {
    return windowed ? tokens / seq_len : tokens == 0 ? 0 : (tokens - 1) / seq_len;
  }
  int64_t num_windows() const { return num_windows(count_, seq_len_, windowed_); }
  int seq_len() const { return seq_len_; }
  bool windowed() const { return windowed_; }
  bool packed() const { return packed_; }

  // Window w's inputs and targets (a windowed one's only when inputs is not
  // null) and, when not null, positions (each token's in its document; in
  // its window unless the data is packed); returns its targets.
  int64_t read(int64_t w, int32_t* inputs, int32_t* targets, int32_t* positions);

 private:
  int64_t read_masked(int64_t w, int32_t* inputs, int32_t* targets, int32_t* positions);

  const TokenStream* tokens_;
  int seq_len_;
  bool windowed_, packed_;
  int64_t begin_, count_;
  std::vector<uint32_t> window_;  // one window's ids as read
};

// data.eval.fraction: whether window w of a dataset of `seed` is held out
// of training for evaluation, each window with probability `fraction`
// apart (0: none), the same on every machine; and how many of [0, n) are.
bool held_out_window(uint64_t seed, int64_t w, double fraction);
int64_t held_out_windows(uint64_t seed, int64_t n, double fraction);

}  // namespace zerod
