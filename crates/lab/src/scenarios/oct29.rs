//! (pending)

use super::LabConfig;
use crate::report::Section;
use crate::LabError;

pub async fn run(_cfg: &LabConfig) -> Result<Section, LabError> {
    Err(LabError::Settings("not yet".into()))
}
