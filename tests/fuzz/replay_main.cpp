// SPDX-License-Identifier: Apache-2.0
// Replays fuzz inputs through a target's LLVMFuzzerTestOneInput without
// libFuzzer, so that every test run checks the corpus (and every crash
// found and fixed stays fixed). Arguments are files or folders (each file
// inside, sorted); compiled with the normal compiler in the normal build.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);

namespace {

bool replay(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "cannot read %s\n", file.c_str());
    return false;
  }
  const std::vector<char> bytes((std::istreambuf_iterator<char>(in)),
                                std::istreambuf_iterator<char>());
  std::fprintf(stderr, "replaying %s (%zu bytes)\n", file.c_str(), bytes.size());
  (void)LLVMFuzzerTestOneInput(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size());
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  std::size_t count = 0;
  bool ok = true;
  for (int i = 1; i < argc; ++i) {
    const std::filesystem::path arg(argv[i]);
    if (std::filesystem::is_directory(arg)) {
      std::vector<std::filesystem::path> files;
      for (const auto& entry : std::filesystem::directory_iterator(arg))
        if (entry.is_regular_file()) files.push_back(entry.path());
      std::sort(files.begin(), files.end());
      for (const auto& f : files) ok = replay(f) && ok, ++count;
    } else {
      ok = replay(arg) && ok;
      ++count;
    }
  }
  if (count == 0) {
    std::fprintf(stderr, "no inputs replayed (give files or folders)\n");
    return 1;
  }
  std::fprintf(stderr, "%zu inputs replayed\n", count);
  return ok ? 0 : 1;
}
