//! Compiles every `.proto` under `imesh/` with protox (pure Rust, no system protoc) and writes
//! the encoded descriptor set next to the generated code, for gRPC reflection, and serde
//! implementations of the proto3 JSON mapping (pbjson).

use std::{env, fs, path::PathBuf};

use prost::Message;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut files = Vec::new();
    collect("imesh", &mut files)?;
    files.sort();
    for f in &files {
        println!("cargo:rerun-if-changed={}", f.display());
    }
    let fds = protox::compile(&files, ["."])?;
    let out = PathBuf::from(env::var("OUT_DIR")?);
    let descriptors = fds.encode_to_vec();
    fs::write(out.join("imesh_descriptor.bin"), &descriptors)?;
    tonic_prost_build::configure().bytes(".").compile_fds(fds)?;
    // The proto3 JSON mapping (serde) of every message, for the gateway's JSON subprotocol.
    pbjson_build::Builder::new()
        .register_descriptors(&descriptors)?
        .build(&[".imesh"])?;
    Ok(())
}

fn collect(dir: &str, files: &mut Vec<PathBuf>) -> std::io::Result<()> {
    for entry in fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            collect(path.to_str().expect("utf-8 proto path"), files)?;
        } else if path.extension().is_some_and(|e| e == "proto") {
            files.push(path);
        }
    }
    Ok(())
}
