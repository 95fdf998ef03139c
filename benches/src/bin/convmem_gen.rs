//! Writes the synthetic conversational-memory benchmark (see `benches/src/convmem.rs`) as
//! JSON and prints its statistics.
//!
//! `convmem_gen --seed S --conversations N --out FILE`

#[path = "../convmem.rs"]
mod convmem;
#[path = "../convmem_types.rs"]
mod convmem_types;

fn main() {
    let mut seed = "convmem-v1".to_string();
    let mut n = 40usize;
    let mut out = None;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let v = args.next().unwrap_or_else(|| panic!("{a} needs a value"));
        match a.as_str() {
            "--seed" => seed = v,
            "--conversations" => n = v.parse().expect("--conversations N"),
            "--out" => out = Some(v),
            _ => panic!("unknown argument {a}; usage: --seed S --conversations N --out FILE"),
        }
    }
    let d = convmem::generate(&seed, n);
    let json = serde_json::to_string_pretty(&d).expect("serialise");
    match out {
        Some(p) => std::fs::write(&p, json).unwrap_or_else(|e| panic!("{p}: {e}")),
        None => println!("{json}"),
    }
    print!("{}", convmem::stats(&d));
}
