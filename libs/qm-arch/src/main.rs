//! `qm-arch SRC [SRC …]`: for each crate source folder, how many imports
//! reach an ancestor module (or the crate root) and how many import
//! circles there are, and what they are with `-v` (each circle, and each
//! import of an ancestor with its file and line). The layers themselves
//! are checked by each crate's `layers` test.

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let verbose = args.iter().any(|a| a == "-v");
    let dirs: Vec<&String> = args.iter().filter(|a| *a != "-v").collect();
    if dirs.is_empty() {
        eprintln!("usage: qm-arch [-v] SRC...   (a crate's src folder)");
        std::process::exit(2);
    }
    let none = qm_arch::Layers {
        layers: &[("all", &[""])],
    };
    for dir in dirs {
        let src = std::path::Path::new(dir);
        let all = qm_arch::modules(src);
        let v = qm_arch::check_modules(src, &all, &none);
        let (_, circles) = qm_arch::summary(&v);
        let parents = qm_arch::ancestor_imports(&all);
        let modules = all.len();
        println!(
            "{dir}: {modules} modules, {parents} imports of an ancestor, {circles} import circles"
        );
        if verbose {
            for x in v
                .iter()
                .filter(|x| !matches!(x, qm_arch::Violation::Unplaced(_)))
            {
                println!("  {x}");
            }
            for m in &all {
                for (to, line) in &m.imports {
                    if qm_arch::is_ancestor(to, &m.path) {
                        let to = if to.is_empty() { "the crate root" } else { to };
                        println!(
                            "  {}:{line}: {} imports its ancestor {to}",
                            m.file.display(),
                            m.path
                        );
                    }
                }
            }
        }
    }
}
