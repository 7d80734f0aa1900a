# mk/install.mk — make install / make uninstall (included by the top Makefile).
#
#   make install   [PREFIX=/usr/local] [DESTDIR=] [SYSCONFDIR=...] [SYSTEMDUNITDIR=$(PREFIX)/lib/systemd/system]
#                  [INSTALL_STRIP=-s]
#   make uninstall (the same variables)
#
# The layout (docs/operations.md, "Install", says why):
#   $(PREFIX)/bin/coloc                  the CLI, for every user
#   $(PREFIX)/sbin/colocd                the daemon, started by systemd (as slurmd is in sbin)
#   $(PREFIX)/lib/coloc/libcoloc.so      the interposer; `coloc run` finds it from its own path
#                                        (<bin>/../lib/coloc), so bin and lib stay under one PREFIX
#   $(PREFIX)/lib/coloc/coloc-ckpt       the checkpoint helper (suspend and resume through the
#                                        driver's checkpoint API), which colocd runs; admins may too
#   $(PREFIX)/lib/coloc/spank_coloc.so   the Slurm plugin, where it was built (libslurm-dev present);
#                                        it finds libcoloc.so beside it and coloc in ../../bin
#   $(SYSTEMDUNITDIR)/colocd.service     from deploy/systemd/colocd.service.in (@SBINDIR@ filled in)
#   $(SYSTEMDUNITDIR)/colocd.socket      deploy/systemd/colocd.socket
#   $(SYSCONFDIR)/coloc/colocd.toml      deploy/colocd.toml, every key commented out; never
#                                        overwritten; uninstall removes it only while unchanged
# DESTDIR is prepended to every path written (packaging, tests) and never appears in a file.
# The default SYSTEMDUNITDIR is on systemd's unit path for PREFIX /usr/local and /usr.
# SYSCONFDIR follows the GNU convention, $(PREFIX)/etc, except for the system prefixes /usr and
# /usr/local, where it is /etc: colocd's own default is /etc/coloc/colocd.toml (a node has one
# colocd), and a PREFIX such as $HOME/coloc never writes to /etc. Wherever the config goes, the
# installed unit names it (COLOC_CONFIG) when it is not colocd's default, and install says so.
# Programs are installed stripped (install -s; INSTALL_STRIP= keeps their symbols): the debug
# information stays in $(BUILD), whose binaries are the same build.
#
# Also usable alone, without building (the install test does this with its build's products):
#   make -f mk/install.mk BUILD=build/asan PREFIX=... install

BUILD ?= build
Q ?= @
PREFIX ?= /usr/local
DESTDIR ?=
SYSCONFDIR ?= $(if $(filter /usr /usr/local,$(PREFIX)),/etc,$(PREFIX)/etc)
SYSTEMDUNITDIR ?= $(PREFIX)/lib/systemd/system
INSTALL ?= install
INSTALL_STRIP ?= -s

COLOC_BINDIR    = $(PREFIX)/bin
COLOC_SBINDIR   = $(PREFIX)/sbin
COLOC_PKGLIBDIR = $(PREFIX)/lib/coloc
COLOC_CONFDIR   = $(SYSCONFDIR)/coloc
COLOC_INSTALLED_CONFIG = $(DESTDIR)$(COLOC_CONFDIR)/colocd.toml
# colocd's default config (daemon/config/config.h: kDefaultConfigPath).
COLOC_DEFAULT_CONFIG = /etc/coloc/colocd.toml
# The unit's line that points colocd at a config elsewhere (none at the default).
COLOC_CONFIG_LINE = $(if $(filter $(COLOC_DEFAULT_CONFIG),$(COLOC_CONFDIR)/colocd.toml),,Environment=COLOC_CONFIG=$(COLOC_CONFDIR)/colocd.toml)
# Where systemd looks for units: only there does daemon-reload help.
COLOC_SYSTEMD_DIRS = /etc/systemd/system /usr/local/lib/systemd/system /usr/lib/systemd/system /lib/systemd/system
COLOC_UNITS_SEEN = $(filter $(COLOC_SYSTEMD_DIRS),$(SYSTEMDUNITDIR))

.PHONY: install uninstall
# The Slurm plugin is built only where Slurm's headers are (tools/slurm/module.mk sets
# SPANK_PLUGIN); used alone, this file installs it when the build has one.
SPANK_PLUGIN ?=
COLOC_SPANK_BUILT = $(or $(SPANK_PLUGIN),$(wildcard $(BUILD)/lib/spank_coloc.so))
install: $(BUILD)/bin/coloc $(BUILD)/bin/colocd $(BUILD)/bin/coloc-ckpt $(BUILD)/lib/libcoloc.so $(SPANK_PLUGIN)
	@printf '  %-8s %s\n' INSTALL '$(DESTDIR)$(PREFIX) (from $(BUILD))'
	$(Q)case '$(PREFIX)' in /*) ;; *) echo "install: PREFIX must be an absolute path (got '$(PREFIX)')" >&2; exit 2;; esac
	$(Q)$(INSTALL) -d '$(DESTDIR)$(COLOC_BINDIR)' '$(DESTDIR)$(COLOC_SBINDIR)' '$(DESTDIR)$(COLOC_PKGLIBDIR)' \
	  '$(DESTDIR)$(SYSTEMDUNITDIR)' '$(DESTDIR)$(COLOC_CONFDIR)'
# install(1) removes the old file before it writes the new one, never writing into it: a running
# colocd and the jobs that have libcoloc.so mapped keep their copies.
	$(Q)$(INSTALL) $(INSTALL_STRIP) -m 0755 '$(BUILD)/bin/coloc' '$(DESTDIR)$(COLOC_BINDIR)/coloc'
	$(Q)$(INSTALL) $(INSTALL_STRIP) -m 0755 '$(BUILD)/bin/colocd' '$(DESTDIR)$(COLOC_SBINDIR)/colocd'
	$(Q)$(INSTALL) $(INSTALL_STRIP) -m 0644 '$(BUILD)/lib/libcoloc.so' '$(DESTDIR)$(COLOC_PKGLIBDIR)/libcoloc.so'
	$(Q)$(INSTALL) $(INSTALL_STRIP) -m 0755 '$(BUILD)/bin/coloc-ckpt' '$(DESTDIR)$(COLOC_PKGLIBDIR)/coloc-ckpt'
	$(Q)$(if $(COLOC_SPANK_BUILT),$(INSTALL) $(INSTALL_STRIP) -m 0644 '$(COLOC_SPANK_BUILT)' '$(DESTDIR)$(COLOC_PKGLIBDIR)/spank_coloc.so',\
	  echo "  note:    no Slurm plugin: it is built where Slurm's headers are (libslurm-dev; COLOC_WITH_SLURM=1 make installs them)")
	$(Q)sed -e 's|@SBINDIR@|$(COLOC_SBINDIR)|g' $(if $(COLOC_CONFIG_LINE),-e 's|^@CONFIG@$$|$(COLOC_CONFIG_LINE)|',-e '/^@CONFIG@$$/d') \
	  deploy/systemd/colocd.service.in > '$(DESTDIR)$(SYSTEMDUNITDIR)/colocd.service.tmp'
	$(Q)$(INSTALL) -m 0644 '$(DESTDIR)$(SYSTEMDUNITDIR)/colocd.service.tmp' '$(DESTDIR)$(SYSTEMDUNITDIR)/colocd.service'
	$(Q)rm -f '$(DESTDIR)$(SYSTEMDUNITDIR)/colocd.service.tmp'
	$(Q)$(INSTALL) -m 0644 deploy/systemd/colocd.socket '$(DESTDIR)$(SYSTEMDUNITDIR)/colocd.socket'
	$(Q)if [ -e '$(COLOC_INSTALLED_CONFIG)' ]; then \
	  echo "  kept     $(COLOC_INSTALLED_CONFIG) (already there; the example is deploy/colocd.toml)"; \
	else \
	  $(INSTALL) -m 0644 deploy/colocd.toml '$(COLOC_INSTALLED_CONFIG)'; \
	fi
	$(Q)if [ -n "$(COLOC_CONFIG_LINE)" ]; then \
	  echo "  note:    the config is $(COLOC_CONFDIR)/colocd.toml, not colocd's default $(COLOC_DEFAULT_CONFIG): the unit sets COLOC_CONFIG to it; by hand, run colocd --config $(COLOC_CONFDIR)/colocd.toml"; \
	else \
	  echo "  config:  $(COLOC_CONFDIR)/colocd.toml (colocd's default path)"; \
	fi
# The units work only where systemd looks for them: say so when SYSTEMDUNITDIR is elsewhere (a
# PREFIX such as /opt/coloc or a scratch directory) instead of advising a systemctl that cannot
# find them.
	$(Q)if [ -z '$(DESTDIR)' ]; then \
	  case '$(SYSTEMDUNITDIR)' in \
	    /etc/systemd/system|/usr/local/lib/systemd/system|/usr/lib/systemd/system|/lib/systemd/system) \
	      echo "  then:    systemctl daemon-reload && systemctl enable --now colocd.socket colocd.service";; \
	    *) echo "  note:    systemd does not look for units in $(SYSTEMDUNITDIR): install them with SYSTEMDUNITDIR=/etc/systemd/system, or start $(COLOC_SBINDIR)/colocd yourself";; \
	  esac; \
	fi

uninstall:
	@printf '  %-8s %s\n' UNINSTALL '$(DESTDIR)$(PREFIX)'
	$(Q)rm -f '$(DESTDIR)$(COLOC_BINDIR)/coloc' '$(DESTDIR)$(COLOC_SBINDIR)/colocd' \
	  '$(DESTDIR)$(COLOC_PKGLIBDIR)/libcoloc.so' '$(DESTDIR)$(COLOC_PKGLIBDIR)/spank_coloc.so' \
	  '$(DESTDIR)$(COLOC_PKGLIBDIR)/coloc-ckpt' \
	  '$(DESTDIR)$(SYSTEMDUNITDIR)/colocd.service' '$(DESTDIR)$(SYSTEMDUNITDIR)/colocd.socket'
	$(Q)rmdir '$(DESTDIR)$(COLOC_PKGLIBDIR)' 2>/dev/null || true
# The config goes only while it is the example as installed: an edited one is the admin's.
	$(Q)if [ -e '$(COLOC_INSTALLED_CONFIG)' ]; then \
	  if cmp -s deploy/colocd.toml '$(COLOC_INSTALLED_CONFIG)'; then \
	    rm -f '$(COLOC_INSTALLED_CONFIG)'; \
	  else \
	    echo "  kept     $(COLOC_INSTALLED_CONFIG) (edited; remove it yourself if it is no longer wanted)"; \
	  fi; \
	fi
	$(Q)rmdir '$(DESTDIR)$(COLOC_CONFDIR)' 2>/dev/null || true
	$(Q)if [ -z '$(DESTDIR)' ]; then \
	  echo "  note:    the state directory (/var/lib/coloc: reports, history) is kept$(if $(COLOC_UNITS_SEEN),; then: systemctl daemon-reload)"; \
	fi
