#include "io/idx.hpp"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>

#ifdef LENET_HAVE_ZLIB
#include <zlib.h>
#endif

namespace lenet::io {
namespace {

uint32_t read_be32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
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
  z_stream zs;
  std::memset(&zs, 0, sizeof zs);
  if (inflateInit2(&zs, 16 + MAX_WBITS) != Z_OK) throw DataError(name + ": zlib could not start inflating");
  zs.next_in = data.data();
  zs.avail_in = static_cast<uInt>(data.size());  // fits: read_file_bytes caps files at 256 MiB
  std::vector<uint8_t> out;
  size_t used = 0;  // of out's bytes; out grows only when they are all used (many small members are cheap)
  constexpr size_t kChunk = size_t{1} << 20;
  for (;;) {
    if (used == out.size()) {
      if (out.size() >= kMaxDecompressedBytes) {
        inflateEnd(&zs);
        throw DataError(name + ": decompresses to more than " + std::to_string(kMaxDecompressedBytes >> 20) +
                        " MiB, larger than any IDX file of this data set");
      }
      out.resize(out.size() + kChunk);
    }
    zs.next_out = out.data() + used;
    zs.avail_out = static_cast<uInt>(out.size() - used);
    const int rc = inflate(&zs, Z_NO_FLUSH);
    used = out.size() - zs.avail_out;
    // A gzip file may hold several members one after another (`cat a.gz b.gz`, pigz): their data joined.
    if (rc == Z_STREAM_END && zs.avail_in >= 2 && zs.next_in[0] == 0x1f && zs.next_in[1] == 0x8b) {
      if (inflateReset(&zs) != Z_OK) {
        inflateEnd(&zs);
        throw DataError(name + ": zlib could not start inflating the next gzip member");
      }
      continue;
    }
    if (rc == Z_STREAM_END) break;
    if (rc == Z_BUF_ERROR && zs.avail_in == 0) {
      inflateEnd(&zs);
      throw DataError(name + ": truncated gzip stream (ends after " + std::to_string(used) + " decompressed bytes)");
    }
    if (rc != Z_OK && rc != Z_BUF_ERROR) {
      const std::string msg = zs.msg ? zs.msg : "error " + std::to_string(rc);
      inflateEnd(&zs);
      throw DataError(name + ": corrupt gzip data (" + msg + ")");
    }
  }
  out.resize(used);
  inflateEnd(&zs);
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
  std::ifstream in(path, std::ios::binary);
  if (!in) throw DataError(path + ": cannot open (" + std::strerror(errno) + ")");
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) throw DataError(path + ": read error (not a regular file)");
  const uintmax_t size = std::filesystem::file_size(path, ec);
  if (!ec && size > kMaxDecompressedBytes) {
    throw DataError(path + ": " + std::to_string(size >> 20) + " MiB, larger than any IDX file of this data set");
  }
  std::vector<uint8_t> bytes;
  try {
    bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  } catch (const std::ios_base::failure& e) {  // libstdc++ throws from underflow, e.g. on a directory
    throw DataError(path + ": read error (" + e.code().message() + ")");
  }
  if (in.bad()) throw DataError(path + ": read error");
  return maybe_gunzip(std::move(bytes), path);
}

IdxImages parse_idx_images(const uint8_t* data, size_t size, const std::string& name) {
  const uint32_t count = check_idx_header(data, size, name, kIdxImagesMagic, 3, "images");
  const uint32_t rows = read_be32(data + 8);
  const uint32_t cols = read_be32(data + 12);
  if (rows != kImageSide || cols != kImageSide) {
    throw DataError(name + ": images are " + std::to_string(rows) + "x" + std::to_string(cols) + ", expected 28x28");
  }
  check_length(size, 16, count, kImagePixels, name);
  IdxImages images;
  images.count = count;
  images.pixels.assign(data + 16, data + size);
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
  const std::vector<uint8_t> bytes = read_file_bytes(path);
  return parse_idx_images(bytes.data(), bytes.size(), path);
}

std::vector<uint8_t> read_idx_labels(const std::string& path) {
  const std::vector<uint8_t> bytes = read_file_bytes(path);
  return parse_idx_labels(bytes.data(), bytes.size(), path);
}

}  // namespace lenet::io
