#include <cstdio>
int main() { std::puts("ferrite"); return 0; }
