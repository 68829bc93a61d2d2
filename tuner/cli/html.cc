#include "tuner/cli/html.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"

namespace evotune {
namespace {

constexpr char kStyle[] =
    "body{font-family:sans-serif;margin:2em;max-width:60em}"
    "svg{display:block;margin:0.5em 0 1.5em}"
    ".frame{fill:none;stroke:#ccc}.tick{font-size:11px;fill:#555}"
    ".trial{fill:#1f77b4;fill-opacity:0.6}.best{fill:none;stroke:#ff7f0e;"
    "stroke-width:2}.median{stroke:#ff7f0e;stroke-width:2}"
    ".fail{font-size:12px;font-weight:bold}"
    "table{border-collapse:collapse}td,th{border:1px solid #ccc;"
    "padding:2px 6px;font-size:13px}td{white-space:nowrap}"
    "dt{font-weight:bold}"
    ".ours{fill:#1f77b4}.sdpa{fill:#7f7f7f}"
    ".gain{fill:#2ca02c}.little{fill:#bbb}";

}  // namespace

std::string HtmlEscape(const std::string& s) {
  return absl::StrReplaceAll(
      s, {{"&", "&amp;"}, {"<", "&lt;"}, {">", "&gt;"}, {"\"", "&quot;"}});
}

std::string HtmlPage(const std::string& title, const std::string& body) {
  return absl::StrCat(
      "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
      "<title>",
      HtmlEscape(title), "</title>\n<style>", kStyle,
      "</style>\n</head>\n<body>\n<h1>", HtmlEscape(title), "</h1>\n", body,
      "</body>\n</html>\n");
}

}  // namespace evotune
