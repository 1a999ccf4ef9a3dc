# Finds Python and pybind11 and defines cognate_add_module(NAME SOURCES...),
# which builds one extension module into COGNATE_OUTPUT_DIR.
find_package(Python 3.10 COMPONENTS Interpreter Development.Module REQUIRED)
if(NOT pybind11_DIR)
  execute_process(COMMAND "${Python_EXECUTABLE}" -m pybind11 --cmakedir
                  OUTPUT_VARIABLE pybind11_DIR OUTPUT_STRIP_TRAILING_WHITESPACE)
endif()
find_package(pybind11 CONFIG REQUIRED)

function(cognate_add_module name)
  pybind11_add_module(${name} ${ARGN})
  target_compile_options(${name} PRIVATE -O3 -Wall -Wextra)
  set_target_properties(${name} PROPERTIES
    LIBRARY_OUTPUT_DIRECTORY "${COGNATE_OUTPUT_DIR}")
endfunction()
