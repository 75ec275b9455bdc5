# The layout rules of docs/architecture.md (dependencies one way, private headers in their
# folder), checked on the source tree (tests/house/layout.py). Python only: label lint.
add_test(NAME house.layout COMMAND ${FL_PYTHON} ${FL_TESTS_DIR}/house/layout.py ${CMAKE_SOURCE_DIR})
set_tests_properties(house.layout PROPERTIES LABELS lint)
