package provider

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/plancheck"
	"github.com/hashicorp/terraform-plugin-testing/terraform"
)

// featuresHCL names the topic by its full name, or (short) by its name in the tenant,
// which the API takes too and answers as the full name.
func featuresHCL(env accEnv, tenant string, ttl int, linger int, schedule string, description string, short bool) string {
	named := "meridian_topic.history.full_name"
	if short {
		named = "meridian_topic.history.name"
	}
	return env.adminProvider() + strings.ReplaceAll(fmt.Sprintf(`
resource "meridian_topic" "history" {
  tenant           = %[1]q
  name             = "history"
  partitions       = 1
  remote_storage   = true
  max_segment_bytes = 1048576
  segment_ms       = 60000
}

resource "meridian_lane" "ppe" {
  tenant        = %[1]q
  name          = "ppe"
  topics        = [TOPIC]
  orphan_policy = "hold"
  ttl_s         = %[2]d
}

resource "meridian_databus_config" "app" {
  tenant      = %[1]q
  name        = "app"
  description = "the app's streams"
  document = jsonencode({
    streams = {
      events = { topic = meridian_topic.history.full_name, linger_ms = %[3]d }
    }
  })
}

resource "meridian_export" "parquet" {
  tenant        = %[1]q
  name          = "history-parquet"
  topic         = TOPIC
  fields        = [{ name = "user", path = "user", type = "long" }]
  partition_by  = ["date"]
  schedule_kind = %[4]q
  interval_minutes = %[4]q == "interval" ? 30 : null
}

resource "meridian_index" "by_user" {
  tenant      = %[1]q
  name        = "by-user"
  description = %[5]q
  topic       = TOPIC
  fields      = [{ name = "user", path = "user", type = "long" }]
}
`, tenant, ttl, linger, schedule, description), "TOPIC", named)
}

// scoped reads a tenant-scoped object by name as the administrator.
func scoped(t *testing.T, env accEnv, kind, tenant, name string, out any) error {
	return env.apiGet(t, kind+"/"+escape(name), tenantQuery(tenant), out)
}

// TestAccTenantFeatures: a lane, a Databus configuration, a Parquet export and an
// index on a tiered topic; each changed in place, the Databus document's drift from
// the API, imports, and destroy.
func TestAccTenantFeatures(t *testing.T) {
	env := testAccEnv(t)
	tenant := env.testTenant(t)
	admin := env.admin(t)
	resource.ParallelTest(t, resource.TestCase{
		ProtoV6ProviderFactories: testAccProviders,
		CheckDestroy: func(*terraform.State) error {
			for _, kind := range [][2]string{{"lanes", "ppe"}, {"databus-configs", "app"}, {"exports", "history-parquet"}, {"indexes", "by-user"}} {
				if err := env.expectGone(t, kind[0]+"/"+kind[1], tenantQuery(tenant)); err != nil {
					return err
				}
			}
			return nil
		},
		Steps: []resource.TestStep{
			{
				// The topic named in the tenant: kept so in the state, the API's full name
				// not an inconsistent result.
				Config: featuresHCL(env, tenant, 3600, 5, "manual", "users", true),
				Check: resource.ComposeAggregateTestCheckFunc(
					resource.TestCheckResourceAttr("meridian_lane.ppe", "all_topics", "false"),
					resource.TestCheckResourceAttr("meridian_lane.ppe", "topics.0", "history"),
					resource.TestCheckResourceAttr("meridian_export.parquet", "topic", "history"),
					resource.TestCheckResourceAttr("meridian_index.by_user", "topic", "history"),
					resource.TestCheckResourceAttr("meridian_databus_config.app", "version", "1"),
					resource.TestCheckResourceAttrSet("meridian_export.parquet", "target_uri"),
					resource.TestCheckResourceAttr("meridian_index.by_user", "fields.0.path", "user"),
					func(*terraform.State) error {
						var lane laneJSON
						if err := scoped(t, env, "lanes", tenant, "ppe", &lane); err != nil {
							return err
						}
						if lane.TTLs != 3600 || lane.OrphanPolicy != "hold" || len(lane.Topics) != 1 || lane.Topics[0] != tenant+".history" {
							return fmt.Errorf("API has lane %+v", lane)
						}
						return nil
					},
				),
			},
			{
				// Named by its full name now: the same topic, so the export and the index
				// change in place (not replaced).
				Config: featuresHCL(env, tenant, 7200, 20, "interval", "users, by id", false),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction("meridian_lane.ppe", plancheck.ResourceActionUpdate),
					plancheck.ExpectResourceAction("meridian_databus_config.app", plancheck.ResourceActionUpdate),
					plancheck.ExpectResourceAction("meridian_export.parquet", plancheck.ResourceActionUpdate),
					plancheck.ExpectResourceAction("meridian_index.by_user", plancheck.ResourceActionUpdate),
				}},
				Check: resource.ComposeAggregateTestCheckFunc(
					resource.TestCheckResourceAttr("meridian_databus_config.app", "version", "2"),
					func(*terraform.State) error {
						var export exportJSON
						if err := scoped(t, env, "exports", tenant, "history-parquet", &export); err != nil {
							return err
						}
						if export.ScheduleKind != "interval" || export.IntervalMinutes == nil || *export.IntervalMinutes != 30 {
							return fmt.Errorf("API has export %+v", export)
						}
						var index indexJSON
						if err := scoped(t, env, "indexes", tenant, "by-user", &index); err != nil {
							return err
						}
						if index.Description != "users, by id" {
							return fmt.Errorf("API has index %+v", index)
						}
						return nil
					},
				),
			},
			{
				// Drift: the document changed through the API is put back.
				PreConfig: func() {
					doc := map[string]any{"streams": map[string]any{"other": map[string]any{"topic": tenant + ".history"}}}
					if err := admin.Patch(context.Background(), "databus-configs/app", tenantQuery(tenant),
						map[string]any{"document": doc}, nil); err != nil {
						t.Fatal(err)
					}
				},
				Config: featuresHCL(env, tenant, 7200, 20, "interval", "users, by id", false),
				ConfigPlanChecks: resource.ConfigPlanChecks{PreApply: []plancheck.PlanCheck{
					plancheck.ExpectResourceAction("meridian_databus_config.app", plancheck.ResourceActionUpdate),
				}},
				Check: func(*terraform.State) error {
					var config databusConfigJSON
					if err := scoped(t, env, "databus-configs", tenant, "app", &config); err != nil {
						return err
					}
					var doc struct {
						Streams map[string]map[string]any `json:"streams"`
					}
					if err := json.Unmarshal(config.Document, &doc); err != nil {
						return err
					}
					if _, ok := doc.Streams["events"]; !ok || len(doc.Streams) != 1 || doc.Streams["events"]["linger_ms"] != float64(20) {
						return fmt.Errorf("API has document %s", config.Document)
					}
					return nil
				},
			},
			{ResourceName: "meridian_lane.ppe", ImportState: true, ImportStateVerify: true,
				ImportStateVerifyIgnore: []string{"force_destroy"}},
			{ResourceName: "meridian_databus_config.app", ImportState: true, ImportStateVerify: true,
				// Read back as the API holds it, defaults filled in.
				ImportStateVerifyIgnore: []string{"document"}},
			{ResourceName: "meridian_export.parquet", ImportState: true, ImportStateVerify: true},
			{ResourceName: "meridian_index.by_user", ImportState: true, ImportStateVerify: true},
		},
	})
}
