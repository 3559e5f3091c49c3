//! What-if evaluation: does quota sharing pay on real workloads? Reads a
//! trace ([`trace`]), maps it to shares, instances and checkpoints
//! ([`workload`]), runs it under several policies on the simulator — the
//! scheduling core itself, never a second implementation ([`compare`]) —
//! and writes the report ([`render`]: HTML with SVG plots, JSON, Markdown).

pub mod compare;
pub mod render;
pub mod trace;
pub mod workload;

/// Where the traces come from, as their README asks the report to say.
pub const CITATION: &str = "Jobs: the ITP-2021 traces of ten of Microsoft's internal GPU clusters (2021-03-04 to 2021-05-03), from the public repository microsoft/elasticflow-traces (data/raw-traces.tar.gz, MIT licence), published with the ASPLOS '23 paper \"ElasticFlow\". Team sizes (teams mapping): the daily GPU quota of the 25 virtual clusters of SenseTime's Venus cluster, from S-Lab-System-Group/HeliosData (cluster_gpu_number.csv, CC BY 4.0).";
