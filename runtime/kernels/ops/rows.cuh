// What the row kernels' launches share (rows.h): the row a warp holds in
// registers, chosen by its length. Included by the ops' .cuh files.
#pragma once

#include <type_traits>

#include "runtime/kernels/ops/rows.h"

namespace zerod::cuda {

// f(integral_constant<int, kHeld>) for the vectors a lane holds of a row
// of C on a warp (rows.h's held_vectors); false where a row is too
// long to hold.
template <DType kT, class F>
bool with_held_row(int C, F f) {
  switch (held_vectors<kT>(C, 32)) {
    case 4:
      f(std::integral_constant<int, 4>{});
      return true;
    case 8:
      f(std::integral_constant<int, 8>{});
      return true;
    case 16:
      f(std::integral_constant<int, 16>{});
      return true;
    default:
      return false;
  }
}

}  // namespace zerod::cuda
