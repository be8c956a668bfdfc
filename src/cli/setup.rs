//! `weir setup vscode [--apply | --undo] [--settings FILE]`: prints, applies or takes back out
//! [`weir::client_setup::vscode`]'s settings.

use super::args::{GlobalArgs, SetupTarget};
use super::context::{fail, load};
use std::process::ExitCode;
use weir::client_setup::vscode;

pub fn run(target: SetupTarget, global: &GlobalArgs) -> ExitCode {
    let install = match load(global) {
        Ok(i) => i,
        Err(code) => return code,
    };
    let SetupTarget::Vscode {
        apply,
        undo,
        settings,
    } = target;
    let proxy = install.proxy_url();
    let explicit = settings.is_some();
    if undo {
        let Some(path) = settings.or_else(vscode::default_settings_path) else {
            return fail("cannot tell where VS Code's settings.json is; pass --settings FILE");
        };
        return match vscode::undo(&path, &proxy) {
            Ok(Some(backup)) => {
                println!("weir: took Weir's proxy settings out of {}", path.display());
                println!("weir: the previous version is in {}", backup.display());
                println!("weir: restart VS Code");
                ExitCode::SUCCESS
            }
            Ok(None) => {
                println!(
                    "weir: {} does not point VS Code at Weir ({proxy}); nothing changed",
                    path.display()
                );
                ExitCode::SUCCESS
            }
            Err(e) => fail(e),
        };
    }
    let target = vscode::settings_target();
    let remote = target.as_ref().and_then(|t| t.remote.clone());
    if !apply {
        match (&remote, &target) {
            (Some(why), Some(t)) => {
                println!("// {}.", vscode::remote_note(why));
                println!(
                    "// Add to {} (or run `weir setup vscode --apply`):",
                    t.path.display()
                );
            }
            _ => println!(
                "// Add to VS Code's user settings.json (or run `weir setup vscode --apply`):"
            ),
        }
        print!("{}", vscode::snippet(&proxy));
        println!(
            "// VS Code trusts Weir's CA through the system store: run `weir ca install` once."
        );
        return ExitCode::SUCCESS;
    }
    let Some(path) = settings.or_else(vscode::default_settings_path) else {
        return fail("cannot tell where VS Code's settings.json is; pass --settings FILE");
    };
    match vscode::apply(&path, &proxy) {
        Ok(backup) => {
            println!("weir: updated {}", path.display());
            if let (Some(why), false) = (&remote, explicit) {
                println!("weir: {}", vscode::remote_note(why));
            }
            if let Some(b) = backup {
                println!("weir: the previous version is in {}", b.display());
            }
            println!("weir: restart VS Code; it trusts Weir's CA through the system store (`weir ca install`)");
            ExitCode::SUCCESS
        }
        Err(e) => fail(e),
    }
}
