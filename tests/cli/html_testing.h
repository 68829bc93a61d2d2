// For tests of the HTML reports: how often a pattern occurs in a page.
#ifndef EVOTUNE_TESTS_CLI_HTML_TESTING_H_
#define EVOTUNE_TESTS_CLI_HTML_TESTING_H_

#include <iterator>
#include <regex>
#include <string>

namespace evotune {

// The matches of the regular expression `pattern` in `text`.
inline int Count(const std::string& text, const std::string& pattern) {
  const std::regex re(pattern);
  return static_cast<int>(
      std::distance(std::sregex_iterator(text.begin(), text.end(), re),
                    std::sregex_iterator()));
}

}  // namespace evotune

#endif  // EVOTUNE_TESTS_CLI_HTML_TESTING_H_
