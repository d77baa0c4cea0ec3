-- Variables set to '' (issue 33, item 1: the variables layer too): memory, runtime and disk keep what was applied,
-- and the variables ProxySQL refuses to SET (init_connect...) answer its error.
SET mysql-init_connect=''
UPDATE global_variables SET variable_value='' WHERE variable_name='mysql-init_connect'
SET mysql-default_schema=''
SET mysql-firewall_whitelist_errormsg=''
SET mysql-keep_multiplexing_variables=''
SET admin-stats_credentials=''
SET mysql-default_session_track_gtids=''
LOAD MYSQL VARIABLES TO RUNTIME
LOAD ADMIN VARIABLES TO RUNTIME
SAVE MYSQL VARIABLES TO DISK
SAVE ADMIN VARIABLES TO DISK
SELECT variable_name, variable_value FROM global_variables WHERE variable_name IN ('mysql-init_connect','mysql-default_schema','mysql-firewall_whitelist_errormsg','mysql-keep_multiplexing_variables','admin-stats_credentials','mysql-default_session_track_gtids') ORDER BY variable_name
SELECT variable_name, variable_value FROM runtime_global_variables WHERE variable_name IN ('mysql-init_connect','mysql-default_schema','mysql-firewall_whitelist_errormsg','mysql-keep_multiplexing_variables','admin-stats_credentials','mysql-default_session_track_gtids') ORDER BY variable_name
SELECT variable_name, variable_value FROM disk.global_variables WHERE variable_name IN ('mysql-init_connect','mysql-default_schema','mysql-firewall_whitelist_errormsg','mysql-keep_multiplexing_variables','admin-stats_credentials','mysql-default_session_track_gtids') ORDER BY variable_name
