// One convention for both programs' command lines: --help and --version print to stdout and exit 0;
// a usage error (unknown option, missing or bad value, bad number, missing subcommand) prints one
// line of reason and the usage line on stderr and exits 2, like every other refused input.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdio>
#include <string>

#include "data_dir.hpp"

namespace mha::platform {

// "mha compute [OPTIONS]" for a subcommand, "mha compute|bench|... [OPTIONS]" for a program with
// subcommands, "mha-studio [OPTIONS] [FILE]" otherwise.
inline std::string usage_line(const CLI::App& program, const CLI::App& command) {
  std::string line = program.get_name();
  if (&command != &program) {
    line += " " + command.get_name();
  } else if (!program.get_subcommands({}).empty()) {
    char sep = ' ';
    for (const CLI::App* sub : program.get_subcommands({})) {
      line += sep + sub->get_name();
      sep = '|';
    }
  }
  line += " [OPTIONS]";
  for (const CLI::Option* opt : command.get_options())
    if (opt->get_positional()) line += " [" + opt->get_name() + "]";
  return line;
}

// Adds --version ("<name> <version>") to `program`.
inline void add_version_flag(CLI::App& program) {
  program.set_version_flag("--version", program.get_name() + " " + version(), "Print the version and exit");
}

// The help text of `command` alone (CLI::App::help() shows the chosen subcommand's instead).
inline std::string help_text(const CLI::App& command, const std::string& prefix) {
  return command.get_formatter()->make_help(&command, prefix, CLI::AppFormatMode::Normal);
}

// Prints a usage error the conventional way and returns its exit status, 2.
inline int usage_error(const CLI::App& program, const CLI::App& command, const std::string& reason) {
  const std::string help = &command == &program ? program.get_name() + " --help"
                                                : program.get_name() + " help " + command.get_name();
  std::fprintf(stderr, "%s: error: %s\nusage: %s  (%s lists the options)\n", program.get_name().c_str(),
               reason.c_str(), usage_line(program, command).c_str(), help.c_str());
  return 2;
}

// Parses the command line. Returns -1 to go on, else the status to exit with.
inline int parse_command_line(CLI::App& program, int argc, char** argv) {
  // A first word that names no command: say so (CLI11 would only ask for a subcommand).
  if (argc > 1 && argv[1][0] != '-' && !program.get_subcommands({}).empty()) {
    bool known = false;
    for (const CLI::App* sub : program.get_subcommands({})) known = known || sub->check_name(argv[1]);
    if (!known) return usage_error(program, program, std::string("no command '") + argv[1] + "'");
  }
  try {
    program.parse(argc, argv);
    return -1;
  } catch (const CLI::Success& e) {  // --help, --version
    return program.exit(e);
  } catch (const CLI::ParseError& e) {
    // The deepest subcommand the parser had entered is the one whose usage helps.
    const CLI::App* command = &program;
    while (!command->get_subcommands().empty()) command = command->get_subcommands().front();
    return usage_error(program, *command, e.what());
  }
}

}  // namespace mha::platform
