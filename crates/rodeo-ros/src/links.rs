//! The former home of the network and file inputs' options and of the node's readout progress,
//! now in [`crate::inputs`]: re-exported here so that the paths `rodeo_ros::links::...` keep
//! working.

pub use crate::inputs::file::FileInput;
pub use crate::inputs::network::{NetTotals, NetworkInput};
pub use crate::inputs::progress::ReadoutProgress;
