use clap::Parser;

fn main() {
    let cli = rlharness::app::cli::Cli::parse();
    let status = rlharness::app::main(cli);
    std::process::exit(status.code());
}
