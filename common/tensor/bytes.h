// Fixed-width values in byte strings, in the machine's byte order (every
// file format here is little-endian and written and read on x86-64/arm64
// hosts, both little-endian): the one writer and reader of the model,
// table, table-export and checkpoint files.
//
// Thread safety: ByteReader is a value over a view; one thread at a time.
#ifndef FULCRUM_COMMON_TENSOR_BYTES_H_
#define FULCRUM_COMMON_TENSOR_BYTES_H_

#include <cstddef>
#include <cstring>
#include <string>
#include <string_view>
#include <type_traits>

namespace fulcrum {

// Appends v's bytes to *out.
template <typename T>
void AppendRaw(std::string* out, const T& v) {
  static_assert(std::is_trivially_copyable_v<T>);
  out->append(reinterpret_cast<const char*>(&v), sizeof(v));
}

// Appends n values' bytes to *out.
template <typename T>
void AppendRawArray(std::string* out, const T* values, size_t n) {
  static_assert(std::is_trivially_copyable_v<T>);
  out->append(reinterpret_cast<const char*>(values), n * sizeof(T));
}

// Reads values off the front of a view; every read says whether the bytes
// were there (a false read consumes nothing), so a truncated file is an
// error the caller names, never a read past the end. The view must outlive
// the reader and the views it hands out.
class ByteReader {
 public:
  explicit ByteReader(std::string_view in) : in_(in) {}

  template <typename T>
  bool Get(T* v) {
    static_assert(std::is_trivially_copyable_v<T>);
    if (in_.size() < sizeof(T)) return false;
    std::memcpy(v, in_.data(), sizeof(T));
    in_.remove_prefix(sizeof(T));
    return true;
  }

  // n values into `out` (room for n).
  template <typename T>
  bool GetArray(T* out, size_t n) {
    static_assert(std::is_trivially_copyable_v<T>);
    if (n > in_.size() / sizeof(T)) return false;
    std::memcpy(out, in_.data(), n * sizeof(T));
    in_.remove_prefix(n * sizeof(T));
    return true;
  }

  // The next n bytes, as a view into the input.
  bool Bytes(size_t n, std::string_view* out) {
    if (in_.size() < n) return false;
    *out = in_.substr(0, n);
    in_.remove_prefix(n);
    return true;
  }

  size_t left() const { return in_.size(); }

 private:
  std::string_view in_;
};

}  // namespace fulcrum

#endif  // FULCRUM_COMMON_TENSOR_BYTES_H_
