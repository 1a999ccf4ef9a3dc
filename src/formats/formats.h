// Sparse format conversions used by the kernels' runtime arguments.
// Written in C++ because they run once per (matrix, config) on matrices of up to
// millions of nonzeros, and a numpy version needs several full passes and sorts.
#pragma once

#include <pybind11/pybind11.h>

namespace cognate {

// Registers csr_to_column_panels on the module.
void register_column_panels(pybind11::module_& m);
// Registers csr_to_ell_buckets on the module.
void register_ell(pybind11::module_& m);

}  // namespace cognate
