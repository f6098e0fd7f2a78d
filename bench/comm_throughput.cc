// Reduce-scatter and all-gather through comm/ (queued on the comm thread,
// then waited on) against the same MPI calls made directly on the same
// buffers, in one run, alternating so both see the same machine state.
//
//   mpirun -np 2 --oversubscribe -x OMP_NUM_THREADS=1 build/bench/comm_throughput [reps]
//
// Prints, per message size (bytes of the full buffer, fp32), the best time
// of `reps` calls each way, the bus bandwidth it implies ((n-1)/n of the
// buffer crosses each rank's link) and ours / direct.
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <vector>

#include "comm/mpi_communicator.h"

namespace {

double seconds(const std::function<void()>& f, MPI_Comm comm) {
  MPI_Barrier(comm);
  const auto t0 = std::chrono::steady_clock::now();
  f();
  const double local = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  double slowest = 0;
  MPI_Allreduce(&local, &slowest, 1, MPI_DOUBLE, MPI_MAX, comm);
  return slowest;
}

}  // namespace

int main(int argc, char** argv) {
  const int reps = argc > 1 ? std::atoi(argv[1]) : 5;
  auto made = zerod::make_mpi_communicator(std::chrono::seconds(600));
  if (!made.ok()) {
    std::fprintf(stderr, "%s\n", std::string(made.status().message()).c_str());
    return 1;
  }
  zerod::Communicator& c = **made;
  const int n = c.world_size();
  MPI_Comm direct;
  MPI_Comm_dup(MPI_COMM_WORLD, &direct);
  if (c.rank() == 0) {
    std::printf("ranks %d, best of %d\n", n, reps);
    std::printf("%-10s %-15s %12s %12s %12s %12s %8s\n", "bytes", "collective", "ours ms", "direct ms",
                "ours GB/s", "direct GB/s", "ratio");
  }
  for (int64_t bytes = int64_t(1) << 20; bytes <= int64_t(256) << 20; bytes *= 4) {
    const int64_t block = bytes / 4 / n;  // fp32 elements per rank
    std::vector<float> full(block * n, 1.0f), part(block, 1.0f);
    for (const char* what : {"reduce_scatter", "all_gather"}) {
      const bool rs = what[0] == 'r';
      double ours = 1e30, mpi = 1e30;
      for (int r = 0; r < reps; ++r) {
        ours = std::min(ours, seconds([&] {
          auto w = rs ? c.reduce_scatter(full.data(), part.data(), block, zerod::CommType::kF32, zerod::ReduceOp::kSum)
                      : c.all_gather(part.data(), full.data(), block, zerod::CommType::kF32);
          (void)w->wait();
        }, direct));
        mpi = std::min(mpi, seconds([&] {
          if (rs) {
            MPI_Reduce_scatter_block(full.data(), part.data(), static_cast<int>(block), MPI_FLOAT, MPI_SUM, direct);
          } else {
            MPI_Allgather(part.data(), static_cast<int>(block), MPI_FLOAT, full.data(), static_cast<int>(block),
                          MPI_FLOAT, direct);
          }
        }, direct));
      }
      const double bus = double(bytes) * (n - 1) / n / 1e9;
      if (c.rank() == 0) {
        std::printf("%-10lld %-15s %12.3f %12.3f %12.2f %12.2f %8.3f\n", static_cast<long long>(bytes), what,
                    ours * 1e3, mpi * 1e3, bus / ours, bus / mpi, ours / mpi);
      }
    }
  }
  MPI_Comm_free(&direct);
  return 0;
}
