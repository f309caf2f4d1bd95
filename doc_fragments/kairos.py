"""Documentation every Kairos module shares: what its attributes mean, and its author.

``extends_documentation_fragment: [kairos]`` on every module, with the support it gives:
``kairos.read_only`` (it only reads), ``kairos.check_diff`` (check mode and diff) or
``kairos.check_only`` (check mode, no diff) or ``kairos.no_check`` (neither); a module
unlike these states its own.
"""

from __future__ import annotations


class ModuleDocFragment:
    DOCUMENTATION = r"""
attributes:
  check_mode:
    description: Runs in check mode, reporting what would change and changing nothing.
  diff_mode:
    description: Returns what changed (or would change) as a before/after diff in diff mode.
author: Kairos
"""

    READ_ONLY = r"""
attributes:
  check_mode:
    support: full
    details: It only reads, in check mode as in a normal run, and never reports changed.
  diff_mode:
    support: none
"""

    CHECK_DIFF = r"""
attributes:
  check_mode:
    support: full
  diff_mode:
    support: full
"""

    CHECK_ONLY = r"""
attributes:
  check_mode:
    support: full
  diff_mode:
    support: none
"""

    NO_CHECK = r"""
attributes:
  check_mode:
    support: none
  diff_mode:
    support: none
"""

    # The files option of kairos_files and kairos_process (module_utils/kairos_files.py).
    FILES = r"""
options:
  files:
    description:
      - Whole files to write, each replaced atomically; files whose content and mode already
        match are left alone.
    type: list
    elements: dict
    default: []
    suboptions:
      path:
        description: Absolute path of the file.
        type: path
        required: true
      content:
        description: The file's whole content.
        type: str
        required: true
      mode:
        description: Octal permissions of the file, as a string.
        type: str
        default: "0644"
"""

    # The TLS of a connection (module_utils/kairos_tls.py): the CQL and Redis modules.
    TLS = r"""
options:
  tls:
    description:
      - TLS of the connection (docs/security.md, "TLS") - C(ca_file), the authority the server's
        certificate must chain to (its address must be named in it); C(cert_file) and
        C(key_file), Kairos' client certificate for a server that requires one. Paths on the
        host running the module. Empty for a plaintext connection.
    type: dict
    default: {}
"""
