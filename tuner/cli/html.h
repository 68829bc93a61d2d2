// Pieces of evotune's HTML reports: self-contained pages, no scripts and
// nothing fetched when they are viewed.
#ifndef EVOTUNE_TUNER_CLI_HTML_H_
#define EVOTUNE_TUNER_CLI_HTML_H_

#include <string>

namespace evotune {

// `s` with &, <, > and " escaped, for text and attribute values.
std::string HtmlEscape(const std::string& s);

// A whole page: its title (escaped here) as <title> and <h1>, the reports'
// style sheet, and `body` (HTML).
std::string HtmlPage(const std::string& title, const std::string& body);

}  // namespace evotune

#endif  // EVOTUNE_TUNER_CLI_HTML_H_
