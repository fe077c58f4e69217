#include "engine/cli.hpp"

int main(int argc, char** argv) { return lenet::engine::run_cli(argc, argv); }
