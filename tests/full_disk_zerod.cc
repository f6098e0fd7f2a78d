// zerod for the coordinator tests, its job store on a disk that fills:
// while the file named by ZEROD_TEST_DISK_FULL exists, every write SQLite
// makes fails as on a full disk (SQLITE_FULL). Everything else zerod and
// its jobs write goes to disk as usual. A VFS over the system's, made the
// default, so zerod itself is unchanged.
#include <sqlite3.h>
#include <sys/stat.h>

#include <cstdlib>
#include <iostream>

#include "runtime/coordinator/daemon.h"

namespace {

const char* g_flag = nullptr;
sqlite3_vfs* g_system = nullptr;
sqlite3_vfs g_vfs;

bool disk_full() {
  struct stat st;
  return stat(g_flag, &st) == 0;
}

// Ours, then the system VFS's file in the same allocation.
struct File {
  sqlite3_file base;
  sqlite3_file* real;
};
sqlite3_file* real(sqlite3_file* f) { return reinterpret_cast<File*>(f)->real; }
const sqlite3_io_methods& methods(sqlite3_file* f) { return *real(f)->pMethods; }

const sqlite3_io_methods kMethods = {
    3,
    [](sqlite3_file* f) { return methods(f).xClose(real(f)); },
    [](sqlite3_file* f, void* p, int n, sqlite3_int64 at) { return methods(f).xRead(real(f), p, n, at); },
    [](sqlite3_file* f, const void* p, int n, sqlite3_int64 at) {
      return disk_full() ? SQLITE_FULL : methods(f).xWrite(real(f), p, n, at);
    },
    [](sqlite3_file* f, sqlite3_int64 size) { return methods(f).xTruncate(real(f), size); },
    [](sqlite3_file* f, int flags) { return methods(f).xSync(real(f), flags); },
    [](sqlite3_file* f, sqlite3_int64* size) { return methods(f).xFileSize(real(f), size); },
    [](sqlite3_file* f, int lock) { return methods(f).xLock(real(f), lock); },
    [](sqlite3_file* f, int lock) { return methods(f).xUnlock(real(f), lock); },
    [](sqlite3_file* f, int* out) { return methods(f).xCheckReservedLock(real(f), out); },
    [](sqlite3_file* f, int op, void* arg) { return methods(f).xFileControl(real(f), op, arg); },
    [](sqlite3_file* f) { return methods(f).xSectorSize(real(f)); },
    [](sqlite3_file* f) { return methods(f).xDeviceCharacteristics(real(f)); },
    [](sqlite3_file* f, int page, int size, int extend, void volatile** out) {
      return methods(f).xShmMap(real(f), page, size, extend, out);
    },
    [](sqlite3_file* f, int offset, int n, int flags) { return methods(f).xShmLock(real(f), offset, n, flags); },
    [](sqlite3_file* f) { methods(f).xShmBarrier(real(f)); },
    [](sqlite3_file* f, int remove) { return methods(f).xShmUnmap(real(f), remove); },
    [](sqlite3_file* f, sqlite3_int64 at, int n, void** out) { return methods(f).xFetch(real(f), at, n, out); },
    [](sqlite3_file* f, sqlite3_int64 at, void* p) { return methods(f).xUnfetch(real(f), at, p); },
};

int open_file(sqlite3_vfs*, sqlite3_filename name, sqlite3_file* f, int flags, int* out_flags) {
  File* file = reinterpret_cast<File*>(f);
  file->real = reinterpret_cast<sqlite3_file*>(file + 1);
  const int rc = g_system->xOpen(g_system, name, file->real, flags, out_flags);
  // SQLite closes a file whose methods are set, even when the open failed.
  file->base.pMethods = file->real->pMethods ? &kMethods : nullptr;
  return rc;
}

}  // namespace

int main(int argc, char** argv) {
  g_flag = std::getenv("ZEROD_TEST_DISK_FULL");
  if (!g_flag) {
    std::cerr << "full-disk-zerod: ZEROD_TEST_DISK_FULL must name the file whose presence fills the disk\n";
    return 2;
  }
  sqlite3_initialize();
  g_system = sqlite3_vfs_find(nullptr);
  g_vfs = *g_system;
  g_vfs.zName = "full-disk";
  g_vfs.szOsFile = static_cast<int>(sizeof(File)) + g_system->szOsFile;
  g_vfs.xOpen = open_file;
  g_vfs.pNext = nullptr;
  sqlite3_vfs_register(&g_vfs, /*makeDflt=*/1);
  return zerod::run_zerod(argc, argv, std::cout, std::cerr);
}
