#include "io/idx.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#ifdef LENET_HAVE_ZLIB
#include <zlib.h>
#endif

namespace lenet::io {
namespace {

uint32_t read_be32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

#ifdef LENET_HAVE_ZLIB
uint32_t read_le32(const uint8_t* p) {
  return uint32_t{p[0]} | (uint32_t{p[1]} << 8) | (uint32_t{p[2]} << 16) | (uint32_t{p[3]} << 24);
}
#endif

// n zero bytes whose whole 2 MiB pages are advised to be transparent huge pages (Linux's default THP
// mode is madvise): the tens of MB of a data file are then faulted in 2 MiB at a time, not 4 KiB, which
// halved the data set's load on a VM where a fault costs microseconds. A hint: a kernel that declines
// it leaves ordinary pages, so its result is not an error.
std::vector<uint8_t> large_buffer(size_t n) {
  std::vector<uint8_t> bytes;
  bytes.reserve(n);  // allocated, not yet touched
#ifdef MADV_HUGEPAGE
  constexpr uintptr_t kHugePage = uintptr_t{2} << 20;
  const auto at = reinterpret_cast<uintptr_t>(bytes.data());
  const uintptr_t first = (at + kHugePage - 1) & ~(kHugePage - 1), last = (at + n) & ~(kHugePage - 1);
  if (last > first) (void)::madvise(reinterpret_cast<void*>(first), last - first, MADV_HUGEPAGE);
#endif
  bytes.resize(n);
  return bytes;
}

bool has_gzip_magic(const std::vector<uint8_t>& d) { return d.size() >= 2 && d[0] == 0x1f && d[1] == 0x8b; }

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string hex32(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08x", v);
  return buf;
}

// Checks the magic and the total length of an IDX file with `dims` dimensions and `item_bytes` bytes
// per item; returns the item count.
uint32_t check_idx_header(const uint8_t* data, size_t size, const std::string& name, uint32_t magic,
                          uint32_t dims, const char* what) {
  const size_t header = 4 + 4 * size_t{dims};
  if (size == 0) throw DataError(name + ": file is empty");
  if (size < 4) throw DataError(name + ": truncated header (" + std::to_string(size) + " bytes)");
  const uint32_t got = read_be32(data);
  if (got != magic) {
    throw DataError(name + ": bad magic number " + hex32(got) + ", expected " + hex32(magic) + " (IDX " +
                    what + ")");
  }
  if (size < header) {
    throw DataError(name + ": truncated header (" + std::to_string(size) + " of " + std::to_string(header) +
                    " bytes)");
  }
  return read_be32(data + 4);
}

void check_length(size_t size, size_t header, uint64_t count, uint64_t item_bytes, const std::string& name) {
  const uint64_t expected = header + count * item_bytes;
  if (size < expected) {
    throw DataError(name + ": truncated data: header promises " + std::to_string(count) + " items (" +
                    std::to_string(expected) + " bytes) but the file has " + std::to_string(size) + " bytes");
  }
  if (size > expected) {
    throw DataError(name + ": " + std::to_string(size - expected) + " unexpected bytes after " +
                    std::to_string(count) + " items");
  }
}

constexpr size_t kImagesHeader = 16;  // magic, count, rows, columns

// Checks an IDX images file of 28x28 images; returns the image count.
uint32_t check_idx_images(const uint8_t* data, size_t size, const std::string& name) {
  const uint32_t count = check_idx_header(data, size, name, kIdxImagesMagic, 3, "images");
  const uint32_t rows = read_be32(data + 8);
  const uint32_t cols = read_be32(data + 12);
  if (rows != kImageSide || cols != kImageSide) {
    throw DataError(name + ": images are " + std::to_string(rows) + "x" + std::to_string(cols) + ", expected 28x28");
  }
  check_length(size, kImagesHeader, count, kImagePixels, name);
  return count;
}

}  // namespace

bool gzip_supported() {
#ifdef LENET_HAVE_ZLIB
  return true;
#else
  return false;
#endif
}

std::vector<uint8_t> maybe_gunzip(std::vector<uint8_t> data, const std::string& name) {
  if (!has_gzip_magic(data)) {
    if (ends_with(name, ".gz")) throw DataError(name + ": named .gz but is not a gzip file");
    return data;
  }
#ifdef LENET_HAVE_ZLIB
  struct Stream {  // inflateEnd on every way out (on a stream never started it returns an error, harmlessly)
    z_stream zs{};
    ~Stream() { inflateEnd(&zs); }
  } stream;
  z_stream& zs = stream.zs;
  if (inflateInit2(&zs, 16 + MAX_WBITS) != Z_OK) throw DataError(name + ": zlib could not start inflating");
  zs.next_in = data.data();
  zs.avail_in = static_cast<uInt>(data.size());  // fits: read_file_bytes caps files at 256 MiB
  // The output buffer starts at 1 MiB. Once the stream has filled it (so its header and first blocks are
  // real deflate) it takes the size the trailer gives (the last member's length mod 2^32: a file of one
  // member is then inflated with one copy, of that first MiB), as far as deflate's largest ratio (1032:1)
  // and the bound allow; past that it doubles. It grows only when full (many small members are cheap),
  // never past the bound.
  const size_t n = data.size();
  const uint64_t trailer = n < 18 ? 0 : read_le32(data.data() + n - 4);  // 18: gzip's smallest member
  const size_t hint = std::min<uint64_t>({trailer, uint64_t{n} * 1032, kMaxDecompressedBytes});
  constexpr size_t kFirst = size_t{1} << 20;
  std::vector<uint8_t> out;
  size_t used = 0;  // of out's bytes
  for (;;) {
    if (used == out.size()) {
      if (out.size() >= kMaxDecompressedBytes) {
        throw DataError(name + ": decompresses to more than " + std::to_string(kMaxDecompressedBytes >> 20) +
                        " MiB, larger than any IDX file of this data set");
      }
      const size_t size = out.empty() ? kFirst : std::max(2 * out.size(), hint);
      std::vector<uint8_t> larger = large_buffer(std::min(size, kMaxDecompressedBytes));
      std::copy(out.begin(), out.end(), larger.begin());
      out.swap(larger);
    }
    zs.next_out = out.data() + used;
    zs.avail_out = static_cast<uInt>(out.size() - used);
    const int rc = inflate(&zs, Z_NO_FLUSH);
    used = out.size() - zs.avail_out;
    // A gzip file may hold several members one after another (`cat a.gz b.gz`, pigz): their data joined.
    if (rc == Z_STREAM_END && zs.avail_in >= 2 && zs.next_in[0] == 0x1f && zs.next_in[1] == 0x8b) {
      if (inflateReset(&zs) != Z_OK) throw DataError(name + ": zlib could not start inflating the next gzip member");
      continue;
    }
    if (rc == Z_STREAM_END) break;
    if (rc == Z_BUF_ERROR && zs.avail_in == 0) {
      throw DataError(name + ": truncated gzip stream (ends after " + std::to_string(used) + " decompressed bytes)");
    }
    if (rc != Z_OK && rc != Z_BUF_ERROR)
      throw DataError(name + ": corrupt gzip data (" + (zs.msg ? zs.msg : "error " + std::to_string(rc)) + ")");
  }
  out.resize(used);
  // Anything after the last member is junk.
  if (zs.avail_in != 0) {
    throw DataError(name + ": " + std::to_string(zs.avail_in) + " unexpected bytes after the gzip stream");
  }
  return out;
#else
  throw DataError(name + ": gzip file, but this build has no zlib: gunzip it first or rebuild with zlib");
#endif
}

std::vector<uint8_t> read_file_bytes(const std::string& path) {
  // Non-blocking: a named pipe without a writer is refused below as not a regular file, not waited for.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (const int err = errno; fd < 0) throw DataError(path + ": cannot open (" + std::strerror(err) + ")");
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  const auto read_error = [&](const std::string& why) { return DataError(path + ": read error (" + why + ")"); };
  struct stat st;
  if (::fstat(fd, &st) != 0) throw read_error(std::strerror(errno));  // errno read before the message is built
  if (!S_ISREG(st.st_mode)) throw read_error("not a regular file");
  // Blocking again for the reads: a network or FUSE file system may otherwise answer EAGAIN.
  if (const int flags = ::fcntl(fd, F_GETFL); flags < 0 || ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) < 0)
    throw read_error(std::strerror(errno));
  const auto too_large = [&](uint64_t bytes) {
    return DataError(path + ": " + std::to_string(bytes >> 20) + " MiB, larger than any IDX file of this data set");
  };
  if (static_cast<uint64_t>(st.st_size) > kMaxDecompressedBytes) throw too_large(st.st_size);
  // One read of the size fstat gave, and one more byte that finds the end (or a file that has grown since).
  std::vector<uint8_t> bytes = large_buffer(static_cast<size_t>(st.st_size) + 1);
  size_t got = 0;
  for (;;) {
    if (got == bytes.size()) {
      if (got > kMaxDecompressedBytes) throw too_large(got);
      bytes.resize(std::min(2 * got, kMaxDecompressedBytes + 1));
    }
    const ssize_t n = ::read(fd, bytes.data() + got, bytes.size() - got);
    if (n == 0) break;
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw read_error(std::strerror(errno));
    got += static_cast<size_t>(n);
  }
  bytes.resize(got);
  return maybe_gunzip(std::move(bytes), path);
}

IdxImages parse_idx_images(const uint8_t* data, size_t size, const std::string& name) {
  IdxImages images;
  images.count = check_idx_images(data, size, name);
  images.pixels.assign(data + kImagesHeader, data + size);
  return images;
}

std::vector<uint8_t> parse_idx_labels(const uint8_t* data, size_t size, const std::string& name) {
  const uint32_t count = check_idx_header(data, size, name, kIdxLabelsMagic, 1, "labels");
  check_length(size, 8, count, 1, name);
  std::vector<uint8_t> labels(data + 8, data + size);
  for (size_t i = 0; i < labels.size(); ++i) {
    if (labels[i] >= kNumClasses) {
      throw DataError(name + ": label " + std::to_string(labels[i]) + " at index " + std::to_string(i) +
                      " is outside 0..9");
    }
  }
  return labels;
}

IdxImages read_idx_images(const std::string& path) {
  IdxImages images;
  images.pixels = read_file_bytes(path);
  images.count = check_idx_images(images.pixels.data(), images.pixels.size(), path);
  // The header moved out in place: a copy into a new buffer would cost the pages of a second one.
  images.pixels.erase(images.pixels.begin(), images.pixels.begin() + kImagesHeader);
  return images;
}

std::vector<uint8_t> read_idx_labels(const std::string& path) {
  const std::vector<uint8_t> bytes = read_file_bytes(path);
  return parse_idx_labels(bytes.data(), bytes.size(), path);
}

}  // namespace lenet::io
