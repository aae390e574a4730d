//! What the `replaystore` command and the Python package share: reading a buffer's
//! items out (`source`), writing them as `.npz`, Parquet or JSON lines and reading such
//! files into a new buffer (`transfer`), and how a failure is said (`fail`). The
//! command (`main.rs`) adds its subcommands; the Python extension calls `export`.

pub mod columnar;
pub mod fail;
pub mod jsonl;
pub mod npz;
pub mod progress;
pub mod show;
pub mod source;
pub mod transfer;
