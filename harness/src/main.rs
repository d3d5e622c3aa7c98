use clap::Parser;

fn main() {
    let cli = rlharness::cli::Cli::parse();
    let status = rlharness::app::main(cli);
    std::process::exit(status.code());
}
