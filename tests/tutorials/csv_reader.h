// An RFC 4180 reader for the tests of the tutorials' CSV files: a field in double quotes may hold
// commas, line breaks and doubled quotes (""), which is how tutorial::csv_field writes a run label such
// as "mixed, no scaling". Reading the files this way (as Python's csv module, which scripts/plot.py
// uses, does) is what makes a test see a column shifted by an unquoted comma.
#pragma once
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace hl::test {

inline std::vector<std::vector<std::string>> parse_csv(const std::string& text) {
  std::vector<std::vector<std::string>> rows;
  std::vector<std::string> row;
  std::string field;
  bool quoted = false, any = false;  // any: the current row has begun
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (quoted) {
      if (c == '"' && i + 1 < text.size() && text[i + 1] == '"') {
        field += '"';
        ++i;
      } else if (c == '"') {
        quoted = false;
      } else {
        field += c;
      }
      continue;
    }
    any = true;
    if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      row.push_back(field);
      field.clear();
    } else if (c == '\n' || c == '\r') {
      if (c == '\r' && i + 1 < text.size() && text[i + 1] == '\n') ++i;
      row.push_back(field);
      rows.push_back(row);
      row.clear();
      field.clear();
      any = false;
    } else {
      field += c;
    }
  }
  if (any) {  // a last row without a line break
    row.push_back(field);
    rows.push_back(row);
  }
  return rows;
}

inline std::vector<std::vector<std::string>> read_csv_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return parse_csv(text.str());
}

}  // namespace hl::test
