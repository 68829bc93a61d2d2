#include "tuner/wire/kernel_bundle.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/common/fake_file_system.h"

namespace evotune {
namespace {

using ::testing::HasSubstr;

std::string TempPath(const std::string& name) {
  return (std::filesystem::path(::testing::TempDir()) /
          (name + std::to_string(getpid())))
      .string();
}

TEST(KernelBundleTest, WritesAndReadsBack) {
  v1::KernelBundle bundle;
  bundle.set_created_unix_s(1234);
  v1::Kernel* k = bundle.add_kernels();
  k->set_template_name("naive");
  k->set_cubin(
      std::string("\x7f"
                  "ELF\0\1\2",
                  7));
  k->mutable_geometry()->set_grid_x(8);
  const std::string path = TempPath("bundle");
  ASSERT_TRUE(WriteKernelBundle(path, bundle).ok());
  absl::StatusOr<v1::KernelBundle> read = ReadKernelBundle(path);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->format_version(), static_cast<uint32_t>(kKernelBundleFormat));
  ASSERT_EQ(read->kernels_size(), 1);
  EXPECT_EQ(read->kernels(0).cubin(), k->cubin());
  EXPECT_EQ(read->kernels(0).geometry().grid_x(), 8u);
  EXPECT_EQ(read->created_unix_s(), 1234);
  // No temporary file is left beside it.
  int files = 0;
  for (const auto& e : std::filesystem::directory_iterator(
           std::filesystem::path(path).parent_path())) {
    if (e.path().filename().string().rfind(
            std::filesystem::path(path).filename().string(), 0) == 0) {
      ++files;
    }
  }
  EXPECT_EQ(files, 1);
}

TEST(KernelBundleTest, RefusesMissingForeignAndOtherVersionFiles) {
  EXPECT_EQ(ReadKernelBundle(TempPath("missing")).status().code(),
            absl::StatusCode::kNotFound);

  const std::string text = TempPath("text");
  std::ofstream(text) << "this is no bundle\n";
  absl::StatusOr<v1::KernelBundle> r = ReadKernelBundle(text);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(r.status().message()),
              HasSubstr("not a kernel bundle"));

  v1::KernelBundle future;
  future.set_format_version(kKernelBundleFormat + 1);
  const std::string newer = TempPath("newer");
  std::ofstream(newer, std::ios::binary) << future.SerializeAsString();
  r = ReadKernelBundle(newer);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(r.status().message()), HasSubstr("export it again"));
}

TEST(KernelBundleTest, AFailedWriteLeavesTheOldFile) {
  const std::string path = TempPath("kept");
  v1::KernelBundle one;
  one.add_kernels()->set_template_name("first");
  ASSERT_TRUE(WriteKernelBundle(path, one).ok());
  EXPECT_FALSE(WriteKernelBundle("/nonexistent-dir/x.evtb", one).ok());
  EXPECT_EQ(ReadKernelBundle(path)->kernels(0).template_name(), "first");
}

// Through the seam: a bundle is written whole in one atomic write, and a
// write or read that fails says which path.
TEST(KernelBundleTest, GoesThroughTheFileSystemItIsGiven) {
  FakeFileSystem fs;
  v1::KernelBundle bundle;
  bundle.add_kernels()->set_template_name("naive");
  ASSERT_TRUE(WriteKernelBundle("/b/k.evtb", bundle, fs).ok());
  EXPECT_EQ(fs.writes(), 1);
  EXPECT_EQ(fs.files().count("/b/k.evtb"), 1u);
  absl::StatusOr<v1::KernelBundle> read = ReadKernelBundle("/b/k.evtb", fs);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->format_version(), kKernelBundleFormat);
  EXPECT_EQ(read->kernels(0).template_name(), "naive");
  fs.FailWrites(true);
  absl::Status failed = WriteKernelBundle("/b/k.evtb", v1::KernelBundle(), fs);
  EXPECT_TRUE(absl::IsInternal(failed)) << failed;
  EXPECT_THAT(std::string(failed.message()), HasSubstr("/b/k.evtb"));
  EXPECT_EQ(ReadKernelBundle("/b/k.evtb", fs)->kernels_size(), 1);
  fs.FailReads(true);
  EXPECT_TRUE(absl::IsNotFound(ReadKernelBundle("/b/k.evtb", fs).status()));
  fs.FailReads(false);
  fs.Put("/b/junk.evtb", "\xff\xff\xff");
  EXPECT_TRUE(
      absl::IsInvalidArgument(ReadKernelBundle("/b/junk.evtb", fs).status()));
}

}  // namespace
}  // namespace evotune
