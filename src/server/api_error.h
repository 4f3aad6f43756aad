// Errors in the OpenAI shape: {"error": {"message", "type", "param", "code"}}
// with the HTTP status that carries them. Every 4xx / 5xx the server sends
// (from the request parser, the transport and the handlers) is built here.
#pragma once

#include <string>

namespace ferrite {

struct ApiError {
  int status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;  // the offending request field ("" -> null)
  std::string code;   // a machine-readable code ("" -> null)
};

// The JSON body of `e`.
std::string api_error_body(const ApiError& e);

// A 400 invalid_request_error naming `param`.
inline ApiError bad_request(std::string message, std::string param = {}) {
  return ApiError{400, std::move(message), "invalid_request_error", std::move(param), {}};
}

}  // namespace ferrite
