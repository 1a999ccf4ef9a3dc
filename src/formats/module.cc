#include "formats.h"

PYBIND11_MODULE(_formats, m) {
  m.doc() = "Sparse format conversions for cognate_tvm (CSR -> column-panel CSR, ...)";
  cognate::register_column_panels(m);
  cognate::register_ell(m);
}
