// Typed errors thrown by the engine and its file readers. The CLI prints them; the app catches them
// at its boundary and shows them as UI state. Every message names the argument and what was expected.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

namespace mha {

// Base of every error the engine throws on purpose. `argument` names the offending input
// (e.g. "attn_mask", "embed_dim", a file path) so a UI can show the message next to that control.
struct Error : std::runtime_error {
  std::string argument;
  Error(std::string argument_, const std::string& message)
      : std::runtime_error(message), argument(std::move(argument_)) {}
};

// A size or option that cannot work: embed_dim % num_heads != 0, zero sizes, num_kv_heads not dividing.
struct ConfigError : Error {
  using Error::Error;
};

// A tensor whose shape does not match what the other inputs imply.
struct ShapeError : Error {
  using Error::Error;
};

// A tensor whose dtype is not accepted there (int mask, mixed float/bool where torch forbids it).
struct DtypeError : Error {
  using Error::Error;
};

// A missing, unreadable, truncated or malformed file (NPY, safetensors, scenario).
struct FileError : Error {
  using Error::Error;
};

// Refused before allocating: the trace would need `bytes` bytes, more than `limit_bytes`.
struct TooLargeError : Error {
  std::uint64_t bytes;
  std::uint64_t limit_bytes;
  TooLargeError(std::string argument_, const std::string& message, std::uint64_t bytes_, std::uint64_t limit_)
      : Error(std::move(argument_), message), bytes(bytes_), limit_bytes(limit_) {}
};

// The GPU path could not run a problem (no GL 4.3 context, a shader that failed to compile or link,
// buffers past the device's limits, GL_OUT_OF_MEMORY). The engine catches it and computes on the
// CPU, keeping the message as ForwardResult::fallback_reason.
struct DeviceError : Error {
  using Error::Error;
};

// A forward stopped because its caller asked (ForwardControl::cancel): a newer edit made it obsolete.
struct Cancelled : Error {
  using Error::Error;
};

}  // namespace mha
