// The translation unit that builds the tests' shared precompiled header
// (tests/CMakeLists.txt, SHARDD_FAST_TESTS); as a program it does nothing.
int main() { return 0; }
